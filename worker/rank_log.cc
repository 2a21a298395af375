#include "worker/rank_log.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace shardline::worker {

absl::StatusOr<std::unique_ptr<RankLog>> RankLog::Open(const Options& options) {
  std::FILE* f = std::fopen(options.path.c_str(), "we");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat("rank log: cannot open ", options.path, ": ", std::strerror(errno)));
  }
  std::remove((options.path + ".1").c_str());
  return std::unique_ptr<RankLog>(new RankLog(options, f));
}

RankLog::~RankLog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (reader_.joinable()) reader_.join();
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

void RankLog::Start(int fd) {
  reader_ = std::thread([this, fd] { Read(fd); });
}

void RankLog::Read(int fd) {
  char buf[65536];
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
    }
    // Poll with a timeout, so the destructor can stop a reader whose writers never close.
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file (or an error: nothing more will come)
    Write(absl::string_view(buf, static_cast<size_t>(n)));
  }
  close(fd);
  Finish();
}

void RankLog::Write(absl::string_view data) {
  absl::MutexLock lock(&mu_);
  AppendLocked(data);
}

void RankLog::Finish() {
  absl::MutexLock lock(&mu_);
  if (!partial_.empty()) QueueLineLocked(std::move(partial_));
  partial_.clear();
  if (file_ != nullptr) std::fflush(file_);
  ended_ = true;
}

void RankLog::AppendLocked(absl::string_view data) {
  last_read_ms_ = absl::ToUnixMillis(absl::Now());
  if (file_ != nullptr) {
    if (file_bytes_ > 0 &&
        file_bytes_ + static_cast<int64_t>(data.size()) > options_.max_file_bytes) {
      RotateLocked();
    }
    if (file_ != nullptr) {
      std::fwrite(data.data(), 1, data.size(), file_);
      std::fflush(file_);  // readers (LogTail, people) see it at once
      file_bytes_ += static_cast<int64_t>(data.size());
    }
  }
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    const absl::string_view piece = nl == absl::string_view::npos ? data : data.substr(0, nl);
    const size_t room =
        options_.max_line_bytes - std::min(options_.max_line_bytes, partial_.size());
    partial_.append(piece.data(), std::min(room, piece.size()));
    if (nl == absl::string_view::npos) break;
    QueueLineLocked(std::move(partial_));
    partial_.clear();
    data.remove_prefix(nl + 1);
  }
}

void RankLog::QueueLineLocked(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  queued_bytes_ += static_cast<int64_t>(line.size());
  queue_.push_back(std::move(line));
  while (queued_bytes_ > options_.max_unshipped_bytes && queue_.size() > 1) {
    queued_bytes_ -= static_cast<int64_t>(queue_.front().size());
    queue_.pop_front();
    ++dropped_;
  }
}

void RankLog::RotateLocked() {
  std::fclose(file_);
  file_ = nullptr;
  std::rename(options_.path.c_str(), (options_.path + ".1").c_str());
  file_ = std::fopen(options_.path.c_str(), "we");
  file_bytes_ = 0;
}

RankLog::Pending RankLog::Peek(size_t max_bytes) const {
  Pending p;
  absl::MutexLock lock(&mu_);
  size_t bytes = 0;
  for (const std::string& l : queue_) {
    if (!p.lines.empty() && bytes + l.size() > max_bytes) break;
    bytes += l.size();
    p.lines.push_back(l);
  }
  p.dropped = dropped_;
  p.time_unix_ms = last_read_ms_;
  return p;
}

void RankLog::Commit(size_t lines, int64_t dropped) {
  absl::MutexLock lock(&mu_);
  // Lines dropped since the Peek were the oldest ones: fewer of the peeked lines are left.
  const int64_t dropped_since = dropped_ - dropped;
  const size_t gone = dropped_since > 0 ? static_cast<size_t>(dropped_since) : 0;
  const size_t remove = lines > gone ? lines - gone : 0;
  for (size_t i = 0; i < remove && !queue_.empty(); ++i) {
    queued_bytes_ -= static_cast<int64_t>(queue_.front().size());
    queue_.pop_front();
  }
  dropped_ -= std::min(dropped_, dropped);
}

bool RankLog::Drained() const {
  absl::MutexLock lock(&mu_);
  return ended_ && queue_.empty();
}

bool RankLog::WaitForEnd(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_; };
  return mu_.AwaitWithTimeout(absl::Condition(&ended), timeout);
}

std::string RankLog::Tail(size_t max_bytes) const {
  std::string all;
  for (const std::string& path : {options_.path + ".1", options_.path}) {
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    const std::streamoff start = size > static_cast<std::streamoff>(max_bytes)
                                     ? size - static_cast<std::streamoff>(max_bytes)
                                     : 0;
    in.seekg(start);
    all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (all.size() > max_bytes) {
    all.erase(0, all.size() - max_bytes);
    const size_t nl = all.find('\n');
    if (nl != std::string::npos) all.erase(0, nl + 1);
  }
  return all;
}

}  // namespace shardline::worker
