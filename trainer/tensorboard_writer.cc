#include "trainer/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/durable_file.h"
#include "common/write_beneath.h"
#include "third_party/tensorboard/proto/event.pb.h"

namespace shardline::trainer {
namespace {

void AppendLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = checkpoint::Crc32c(data.data(), data.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(absl::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(data.size(), 8, &out);
  AppendLittleEndian(MaskedCrc32c(out), 4, &out);
  out.append(data.data(), data.size());
  AppendLittleEndian(MaskedCrc32c(data), 4, &out);
  return out;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir) {
  // Beneath the checkpoint roots when the worker set them (common/write_beneath.h).
  if (absl::Status s = checkpoint::MakeDirsDurable(dir); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("train.tensorboard_dir: cannot create ", dir, ": ", s.message()));
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.", absl::ToUnixSeconds(absl::Now()), ".", host, ".",
                   getpid(), ".shardline");
  absl::StatusOr<int> fd = OpenForWrite(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(), absl::StrCat("train.tensorboard_dir: cannot create ",
                                                         path, ": ", fd.status().message()));
  }
  std::FILE* f = fdopen(*fd, "wb");
  if (f == nullptr) {
    close(*fd);
    return absl::InternalError(
        absl::StrCat("train.tensorboard_dir: cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(path, f));
  tensorboard::Event version;
  version.set_wall_time(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  version.set_file_version("brain.Event:2");
  if (absl::Status s = w->WriteRecord(version.SerializeAsString()); !s.ok()) return s;
  return w;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TensorBoardWriter::WriteScalars(
    int64_t step, double wall_time_s, const std::vector<std::pair<std::string, double>>& scalars) {
  tensorboard::Event e;
  e.set_wall_time(wall_time_s);
  e.set_step(step);
  tensorboard::Summary* summary = e.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteRecord(e.SerializeAsString());
}

absl::Status TensorBoardWriter::WriteRecord(const std::string& data) {
  const std::string record = TfRecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot write TensorBoard events to ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shardline::trainer
