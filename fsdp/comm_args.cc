#include "fsdp/comm_args.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/core/ScalarType.h"

namespace shardline::fsdp {
namespace {

absl::Status Bad(absl::string_view group, absl::string_view op, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("group ", group, " op ", op, ": ", what));
}

std::string Describe(const at::Tensor& t) {
  return absl::StrCat(std::string(c10::toString(t.scalar_type())), "[", t.numel(), "] on ",
                      c10::DeviceTypeName(t.device().type(), /*lower_case=*/true));
}

absl::Status CheckTensor(absl::string_view group, absl::string_view op, absl::string_view role,
                         at::DeviceType device, const at::Tensor& t) {
  if (!t.defined()) return Bad(group, op, absl::StrCat(role, " tensor is undefined"));
  if (t.device().type() != device) {
    return Bad(group, op,
               absl::StrCat(role, " tensor ", Describe(t), " is not on ",
                            c10::DeviceTypeName(device, /*lower_case=*/true)));
  }
  if (!t.is_contiguous()) {
    return Bad(group, op, absl::StrCat(role, " tensor ", Describe(t), " is not contiguous"));
  }
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kBFloat16:
    case at::kHalf:
    case at::kDouble:
    case at::kLong:
      return absl::OkStatus();
    default:
      return Bad(group, op, absl::StrCat(role, " tensor has unsupported dtype ", Describe(t)));
  }
}

}  // namespace

std::string DescribeGroupMembers(const std::vector<int>& global_ranks, int rank, int size) {
  if (static_cast<int>(global_ranks.size()) == size && rank >= 0 && rank < size) {
    return absl::StrCat("(group ranks [", absl::StrJoin(global_ranks, ", "), "], this is rank ",
                        global_ranks[rank], ")");
  }
  return absl::StrCat("(this is rank ", rank, " of ", size, " in the group)");
}

std::string CommErrorPrefix(absl::string_view group, absl::string_view op, int64_t step) {
  return absl::StrCat("group ", group, " op ", op, " step ", step, ": ");
}

absl::Status CheckAllGatherArgs(absl::string_view group, int size, at::DeviceType device,
                                const at::Tensor& in, const at::Tensor& out) {
  constexpr absl::string_view kOp = "all_gather";
  if (absl::Status s = CheckTensor(group, kOp, "input", device, in); !s.ok()) return s;
  if (absl::Status s = CheckTensor(group, kOp, "output", device, out); !s.ok()) return s;
  if (in.scalar_type() != out.scalar_type()) {
    return Bad(
        group, kOp,
        absl::StrCat("input ", Describe(in), " and output ", Describe(out), " differ in dtype"));
  }
  if (out.numel() != in.numel() * size) {
    return Bad(
        group, kOp,
        absl::StrCat("output ", Describe(out), " must hold ", size, " x input ", Describe(in)));
  }
  return absl::OkStatus();
}

absl::Status CheckReduceScatterArgs(absl::string_view group, int size, at::DeviceType device,
                                    const at::Tensor& in, const at::Tensor& out) {
  constexpr absl::string_view kOp = "reduce_scatter";
  if (absl::Status s = CheckTensor(group, kOp, "input", device, in); !s.ok()) return s;
  if (absl::Status s = CheckTensor(group, kOp, "output", device, out); !s.ok()) return s;
  if (in.scalar_type() != out.scalar_type()) {
    return Bad(
        group, kOp,
        absl::StrCat("input ", Describe(in), " and output ", Describe(out), " differ in dtype"));
  }
  if (in.scalar_type() == at::kLong) {
    return Bad(group, kOp, "int64 is not supported for reduce_scatter");
  }
  if (in.numel() != out.numel() * size) {
    return Bad(
        group, kOp,
        absl::StrCat("input ", Describe(in), " must hold ", size, " x output ", Describe(out)));
  }
  if (in.numel() > std::numeric_limits<int>::max()) {
    return Bad(group, kOp, absl::StrCat("input ", Describe(in), " exceeds 2^31-1 elements"));
  }
  return absl::OkStatus();
}

absl::Status CheckAllReduceArgs(absl::string_view group, at::DeviceType device, const at::Tensor& t,
                                bool average) {
  constexpr absl::string_view kOp = "all_reduce";
  if (absl::Status s = CheckTensor(group, kOp, "in-place", device, t); !s.ok()) return s;
  if (average && t.scalar_type() == at::kLong) {
    return Bad(group, kOp, "average of an int64 tensor is not supported (use kSum)");
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcastArgs(absl::string_view group, int size, at::DeviceType device,
                                const at::Tensor& t, int root) {
  constexpr absl::string_view kOp = "broadcast";
  if (absl::Status s = CheckTensor(group, kOp, "in-place", device, t); !s.ok()) return s;
  if (root < 0 || root >= size) {
    return Bad(group, kOp, absl::StrCat("root ", root, " is outside the group of ", size));
  }
  return absl::OkStatus();
}

}  // namespace shardline::fsdp
