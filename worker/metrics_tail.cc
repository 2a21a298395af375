#include "worker/metrics_tail.h"

#include <fstream>

#include "google/protobuf/util/json_util.h"

namespace shardline::worker {

std::vector<ProgressReport> MetricsTail::Poll() {
  std::vector<ProgressReport> reports;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return reports;
  in.seekg(offset_);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t last_newline = chunk.rfind('\n');
  if (last_newline == std::string::npos) return reports;
  chunk.resize(last_newline + 1);
  offset_ += static_cast<int64_t>(chunk.size());

  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  size_t start = 0;
  while (start < chunk.size()) {
    const size_t end = chunk.find('\n', start);
    const std::string line = chunk.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    ProgressReport report;
    if (google::protobuf::util::JsonStringToMessage(line, &report, options).ok()) {
      reports.push_back(std::move(report));
    } else {
      ++bad_lines_;
    }
  }
  return reports;
}

}  // namespace shardline::worker
