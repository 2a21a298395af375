#include "trainer/logged_steps.h"

#include <fstream>
#include <iterator>

#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"

namespace shardline::trainer {

void LoggedSteps::ReadNewLines() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return;
  in.seekg(offset_);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t last_newline = chunk.rfind('\n');
  if (last_newline == std::string::npos) return;  // a half-written line waits
  chunk.resize(last_newline + 1);
  offset_ += static_cast<int64_t>(chunk.size());
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  for (size_t start = 0; start < chunk.size();) {
    const size_t end = chunk.find('\n', start);
    const std::string line = chunk.substr(start, end - start);
    start = end + 1;
    ProgressReport r;
    if (line.empty() || !google::protobuf::util::JsonStringToMessage(line, &r, options).ok()) {
      continue;
    }
    pending_.push_back(std::move(r));
    if (pending_.size() > max_pending_) pending_.pop_front();
  }
}

std::vector<ProgressReport> LoggedSteps::UpTo(int64_t step, bool wait_for_step,
                                              absl::Duration wait) {
  ReadNewLines();
  const absl::Time deadline = absl::Now() + wait;
  auto has_step = [&] { return !pending_.empty() && pending_.back().step() >= step; };
  while (wait_for_step && !has_step() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // the line is one write away
    ReadNewLines();
  }
  std::vector<ProgressReport> out;
  for (const ProgressReport& r : pending_) {
    if (r.step() <= step) out.push_back(r);
  }
  return out;
}

void LoggedSteps::Acknowledge(int64_t step) {
  while (!pending_.empty() && pending_.front().step() <= step) pending_.pop_front();
}

}  // namespace shardline::trainer
