#include "trainer/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <c10/core/CachingDeviceAllocator.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shardline::trainer {
namespace {

std::string Num(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/Inf.
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        // Bytes >= 0x80 pass through: strings here are valid UTF-8 (samples are decoded for
        // display), and escaping each byte as \u00XX would turn them into other characters.
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

int64_t ProcStatusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      int64_t kb = 0;
      if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kb)) return kb * 1024;
    }
  }
  return 0;
}

}  // namespace

std::string MetricsToJson(const StepMetrics& m) {
  std::string out = absl::StrCat(
      "{\"step\": ", m.step, ", \"loss\": ", Num(m.loss), ", \"lr\": ", Num(m.lr),
      ", \"grad_norm\": ", Num(m.grad_norm), ", \"step_time_s\": ", Num(m.step_time_s),
      ", \"tokens_per_s\": ", Num(m.tokens_per_s), ", \"mfu\": ", Num(m.mfu),
      ", \"peak_memory_bytes\": ", m.peak_memory_bytes, ", \"rss_bytes\": ", m.rss_bytes);
  if (m.val_loss.has_value()) absl::StrAppend(&out, ", \"val_loss\": ", Num(*m.val_loss));
  if (m.sample.has_value()) absl::StrAppend(&out, ", \"sample\": ", JsonString(*m.sample));
  if (m.cuda_allocated_bytes.has_value()) {
    absl::StrAppend(&out, ", \"cuda_allocated_bytes\": ", *m.cuda_allocated_bytes);
  }
  if (m.cuda_max_allocated_bytes.has_value()) {
    absl::StrAppend(&out, ", \"cuda_max_allocated_bytes\": ", *m.cuda_max_allocated_bytes);
  }
  if (m.loss_scale.has_value()) {
    absl::StrAppend(&out, ", \"loss_scale\": ", Num(*m.loss_scale),
                    ", \"skipped_steps\": ", m.skipped_steps);
  }
  absl::StrAppend(&out, ", \"rank\": ", m.rank, ", \"world_size\": ", m.world_size, "}");
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--metrics_out \"", path, "\" cannot be opened: ", std::strerror(errno)));
  }
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(path, fd));
}

MetricsWriter::~MetricsWriter() { close(fd_); }

absl::Status MetricsWriter::Write(const StepMetrics& m) {
  const std::string line = MetricsToJson(m) + "\n";
  if (write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return absl::InternalError(
        absl::StrCat("writing metrics to \"", path_, "\" failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int64_t CurrentRssBytes() { return ProcStatusKb("VmRSS:"); }
int64_t PeakRssBytes() { return ProcStatusKb("VmHWM:"); }

void FillDeviceMemory(const c10::Device& device, StepMetrics* m) {
  if (!device.is_cuda()) return;
  // Through the device-generic allocator interface, so this library needs no CUDA headers; the
  // CUDA allocator is registered whenever a CUDA tensor exists.
  const c10::CachingDeviceAllocator::DeviceStats stats =
      c10::getDeviceAllocator(c10::DeviceType::CUDA)->getDeviceStats(device.index());
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  const c10::CachingAllocator::Stat& bytes = stats.allocated_bytes[kAll];
  m->cuda_allocated_bytes = bytes.current;
  m->cuda_max_allocated_bytes = bytes.peak;
}

}  // namespace shardline::trainer
