#include "fsdp/engine_state.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace shardline::fsdp {

void MemoryPeaks::Update(const FlatParams& flats) {
  int64_t gathered = 0, grads = 0;
  for (const auto& f : flats) {
    gathered += f->full_bytes();
    grads += f->full_grad_bytes();
  }
  gathered_ = std::max(gathered_, gathered);
  unsharded_grad_ = std::max(unsharded_grad_, grads);
}

MemoryStats ComputeMemoryStats(const FlatParams& flats, const MemoryPeaks& peaks) {
  MemoryStats m;
  for (const auto& f : flats) {
    m.param_shard_bytes += f->shard_bytes();
    m.grad_shard_bytes += f->shard_grad_bytes();
    (f->offloaded() ? m.host_offloaded_shard_bytes : m.device_shard_bytes) +=
        f->shard_bytes() + f->shard_grad_bytes();
    m.padding_bytes += (f->shard_numel() - f->valid_shard_numel()) * 4;
    m.gathered_param_bytes += f->full_bytes();
    m.unsharded_grad_bytes += f->full_grad_bytes();
    m.num_params += f->numel();
  }
  m.peak_gathered_param_bytes = peaks.gathered_param_bytes();
  m.peak_unsharded_grad_bytes = peaks.unsharded_grad_bytes();
  return m;
}

std::vector<ShardSlice> LocalShardSlices(const FlatParams& flats) {
  std::vector<ShardSlice> out;
  for (const auto& f : flats) {
    for (size_t i = 0; i < f->entries().size(); ++i) {
      const FlatParamEntry& e = f->entries()[i];
      FlatParam::LocalRange r = f->LocalRangeOf(i);
      ShardSlice s;
      s.name = e.name;
      s.global_shape = e.shape;
      s.start = r.start;
      s.end = r.end;
      s.local = f->shard().narrow(0, r.shard_offset, r.end - r.start);
      out.push_back(std::move(s));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> GatherFullParams(
    const FlatParams& flats, Communicator* shard, at::Device device, bool keep) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  at::NoGradGuard no_grad;
  for (const auto& f : flats) {
    at::Tensor full;
    if (f->shard_count() == 1) {
      full = f->shard();
    } else {
      // With cpu_offload the host shard travels through the device (the communicator's), and
      // the gathered unit comes back to the host: one unit's full size on the device at a time.
      const at::Tensor src = f->shard().to(device);
      full = at::empty({f->padded_numel()}, src.options());
      absl::Status s = shard->AllGather(src, full);
      if (!s.ok()) return s;
      if (f->offloaded()) full = full.to(at::kCPU);
    }
    if (!keep) continue;
    for (const FlatParamEntry& e : f->entries()) {
      out.emplace_back(e.name, full.narrow(0, e.offset, e.numel).view(e.shape).clone());
    }
  }
  return out;
}

absl::Status LoadFullParams(const FlatParams& flats,
                            const std::map<std::string, at::Tensor>& state) {
  at::NoGradGuard no_grad;
  for (const auto& f : flats) {
    for (size_t i = 0; i < f->entries().size(); ++i) {
      const FlatParamEntry& e = f->entries()[i];
      auto it = state.find(e.name);
      for (size_t a = 0; it == state.end() && a < e.aliases.size(); ++a) {
        it = state.find(e.aliases[a]);
      }
      if (it == state.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("LoadFullParamState: parameter ", e.name, " missing"));
      }
      if (it->second.sizes().vec() != e.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "LoadFullParamState: parameter ", e.name, " has shape ", c10::str(it->second.sizes()),
            ", model has ", c10::str(at::IntArrayRef(e.shape))));
      }
      FlatParam::LocalRange r = f->LocalRangeOf(i);
      if (r.end == r.start) continue;
      f->shard()
          .narrow(0, r.shard_offset, r.end - r.start)
          .copy_(it->second.reshape({-1}).narrow(0, r.start, r.end - r.start));
    }
  }
  return absl::OkStatus();
}

absl::Status InitShards(const FlatParams& flats, const ParamInitializer& init) {
  struct Target {
    FlatParam* flat;
    size_t entry;
  };
  std::map<std::string, Target> by_name;  // Canonical names and aliases.
  std::map<std::string, bool> done;       // Canonical name -> produced.
  for (const auto& f : flats) {
    for (size_t i = 0; i < f->entries().size(); ++i) {
      const FlatParamEntry& e = f->entries()[i];
      by_name[e.name] = {f.get(), i};
      for (const std::string& a : e.aliases) by_name[a] = {f.get(), i};
      done[e.name] = false;
    }
  }
  RETURN_IF_ERROR(init.ForEach([&](const std::string& name, const InitialValue& value) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sharded initialization: the model has no parameter ", name));
    }
    FlatParam& f = *it->second.flat;
    const FlatParamEntry& e = f.entries()[it->second.entry];
    if (value.shape() != e.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("sharded initialization: parameter ", name, " has shape ",
                       c10::str(at::IntArrayRef(e.shape)), ", its initial value ",
                       c10::str(at::IntArrayRef(value.shape()))));
    }
    done[e.name] = true;
    const FlatParam::LocalRange r = f.LocalRangeOf(it->second.entry);
    if (r.end == r.start) return absl::OkStatus();
    return TorchCall("initialize a shard", [&] {
      value.CopyRange(r.start, r.end, f.shard().narrow(0, r.shard_offset, r.end - r.start));
    });
  }));
  for (const auto& [name, visited] : done) {
    if (!visited) {
      return absl::InternalError(
          absl::StrCat("sharded initialization: no initial value for parameter ", name));
    }
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> AliasesOf(const FlatParams& flats) {
  std::map<std::string, std::string> out;
  for (const auto& f : flats) {
    for (const FlatParamEntry& e : f->entries()) {
      for (const std::string& a : e.aliases) out[a] = e.name;
    }
  }
  return out;
}

}  // namespace shardline::fsdp
