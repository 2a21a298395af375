#include "trainer/checkpoint_dir_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "checkpoint/durable_file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/write_beneath.h"

namespace shardline::trainer {
namespace {

constexpr char kProbeKey[] = "checkpoint_dir_probe/probe";
constexpr char kUnseenKeyPrefix[] = "checkpoint_dir_probe/unseen/";
constexpr char kProbeFilePrefix[] = ".shardline-probe-";
// Ranks named one by one in the message when several cannot see the probe.
constexpr size_t kRanksNamed = 16;

// 128 random bits as hex, from the OS (not the training's generators).
std::string NewNonce() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&out, absl::Hex(rd(), absl::kZeroPad8));
  return out;
}

// The probe's first line is its nonce. Returns "" when `path` holds `nonce`, else why not (the
// last failure after `retry`: a network file system may need a moment to show a new name).
std::string LookForProbe(const std::string& path, const std::string& nonce, absl::Duration retry) {
  const absl::Time deadline = absl::Now() + retry;
  for (;;) {
    std::string why;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      why = absl::StrCat("open ", path, ": ", std::strerror(errno));
    } else {
      char buf[256];
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      const int read_errno = errno;
      ::close(fd);
      if (n < 0) {
        why = absl::StrCat("read ", path, ": ", std::strerror(read_errno));
      } else {
        const std::vector<std::string> lines = absl::StrSplit(std::string(buf, n), '\n');
        if (!lines.empty() && lines[0] == nonce) return "";
        why = absl::StrCat(path, " holds another nonce than rank 0 wrote");
      }
    }
    if (absl::Now() >= deadline) return why;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

struct Probe {
  std::string file;
  std::string nonce;
  std::string host;  // Rank 0's.
};

// Rank 0: creates the directory, writes the probe and publishes it. A failure is published too,
// so the other ranks return it at once instead of waiting for the store's timeout.
absl::StatusOr<Probe> WriteProbe(const CheckpointDirProbeOptions& o, fsdp::KvStore* store) {
  Probe p{"", NewNonce(), o.host};
  p.file = absl::StrCat(kProbeFilePrefix, p.nonce);
  const std::string path = absl::StrCat(o.dir, "/", p.file);
  absl::Status written = checkpoint::MakeDirsDurable(o.dir);
  if (written.ok()) {
    written = checkpoint::WriteFileAtomic(path, absl::StrCat(p.nonce, "\n", o.host, "\n"));
  }
  if (!written.ok()) {
    const std::string why =
        absl::StrCat("checkpoint.dir ", o.configured_dir, ": rank 0 on host ", o.host,
                     " cannot write the probe ", path, ": ", written.message());
    RETURN_IF_ERROR(store->Set(kProbeKey, absl::StrCat("error\n", why)));
    return absl::InternalError(why);
  }
  RETURN_IF_ERROR(store->Set(kProbeKey, absl::StrCat("ok\n", p.file, "\n", p.nonce, "\n", p.host)));
  return p;
}

// Every rank: rank 0's probe from the store (or rank 0's failure).
absl::StatusOr<Probe> ReadPublishedProbe(const CheckpointDirProbeOptions& o, fsdp::KvStore* store) {
  ASSIGN_OR_RETURN(const std::vector<std::string> values, store->Get({kProbeKey}, o.timeout));
  const std::vector<std::string> parts = absl::StrSplit(values.at(0), absl::MaxSplits('\n', 3));
  if (parts.size() == 2 && parts[0] == "error") return absl::InternalError(parts[1]);
  if (parts.size() != 4 || parts[0] != "ok") {
    return absl::InternalError(
        absl::StrCat("checkpoint.dir probe: malformed store value \"", values[0], "\""));
  }
  return Probe{parts[1], parts[2], parts[3]};
}

}  // namespace

absl::Status CheckCheckpointDirShared(const CheckpointDirProbeOptions& o, fsdp::KvStore* store,
                                      fsdp::Communicator* world, at::Device device) {
  const int rank = world->rank();
  const int size = world->size();
  if (rank == 0) {
    absl::StatusOr<Probe> written = WriteProbe(o, store);
    if (!written.ok()) return written.status();
  }
  ASSIGN_OR_RETURN(const Probe probe, ReadPublishedProbe(o, store));
  const std::string path = absl::StrCat(o.dir, "/", probe.file);
  // Rank 0 wrote it through this very file system: no retry.
  const std::string unseen =
      LookForProbe(path, probe.nonce, rank == 0 ? absl::ZeroDuration() : o.read_retry);
  if (!unseen.empty()) {
    RETURN_IF_ERROR(
        store->Set(absl::StrCat(kUnseenKeyPrefix, rank), absl::StrCat(o.host, "\n", unseen)));
  }
  // Which ranks could not: a 1 in each such rank's slot. Also the barrier before the removal.
  at::Tensor flags = at::zeros({size}, at::TensorOptions().dtype(at::kFloat));
  if (!unseen.empty()) flags[rank] = 1.0;
  flags = flags.to(device);
  RETURN_IF_ERROR(world->AllReduce(flags, fsdp::ReduceOp::kSum));
  flags = flags.to(at::kCPU);
  if (rank == 0) {
    if (absl::Status s = UnlinkBeneath(path); !s.ok()) {
      SL_LOG(WARNING) << "cannot remove the checkpoint.dir probe: " << s.message();
    }
  }
  std::vector<int> failed;
  for (int r = 0; r < size; ++r) {
    if (flags[r].item<float>() > 0.5f) failed.push_back(r);
  }
  if (failed.empty()) return absl::OkStatus();

  ASSIGN_OR_RETURN(const std::vector<std::string> detail,
                   store->Get({absl::StrCat(kUnseenKeyPrefix, failed[0])}, o.timeout));
  const std::vector<std::string> host_why = absl::StrSplit(detail.at(0), absl::MaxSplits('\n', 1));
  std::string message =
      absl::StrCat("checkpoint.dir ", o.configured_dir, " is not shared: rank ", failed[0],
                   " on host ", host_why[0], " cannot read the probe written by rank 0 on host ",
                   probe.host, " (", host_why.size() > 1 ? host_why[1] : "", ")");
  if (failed.size() > 1) {
    std::vector<int> named(failed.begin(), failed.begin() + std::min(failed.size(), kRanksNamed));
    absl::StrAppend(&message, "; ", failed.size(), " of ", size,
                    " ranks cannot: ", absl::StrJoin(named, ", "),
                    failed.size() > kRanksNamed ? ", ..." : "");
  }
  absl::StrAppend(&message, "; mount one shared volume at ", o.configured_dir, " on every worker");
  return absl::InvalidArgumentError(message);
}

}  // namespace shardline::trainer
