// RankLog: one rank's output (stdout and stderr through a pipe), kept bounded on disk and queued
// for shipping to the coordinator.
//
// On disk: `path` grows to max_file_bytes, then becomes `path.1` (replacing the older one) and a
// new `path` starts, so a rank never holds more than 2 x max_file_bytes of log however long it
// runs, and the newest output is always in `path` (the older part in `path.1`).
// For shipping: whole lines (a line longer than max_line_bytes is cut there) wait in a queue of
// at most max_unshipped_bytes; when the coordinator is away longer than that lasts, the oldest
// lines are dropped and counted (RankLogChunk.dropped_lines).
//
// Thread safety: every method may be called from any thread; one reader thread (Start) reads
// the pipe.
#ifndef SHARDLINE_WORKER_RANK_LOG_H_
#define SHARDLINE_WORKER_RANK_LOG_H_

#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardline::worker {

class RankLog {
 public:
  struct Options {
    std::string path;
    int64_t max_file_bytes = int64_t{8} << 20;
    int64_t max_unshipped_bytes = int64_t{1} << 20;
    size_t max_line_bytes = 16384;
  };
  // Creates (truncates) `path` and removes an old `path.1`. Errors: INTERNAL naming the path.
  static absl::StatusOr<std::unique_ptr<RankLog>> Open(const Options& options);
  // Stops the reader (if any) and closes the files.
  ~RankLog();

  // Reads `fd` (taking it) on a thread of its own until end of file: every writer closed it.
  void Start(int fd);
  // Takes output as the reader does (tests, and messages of the daemon itself).
  void Write(absl::string_view data);
  // End of input: a partial last line is queued as a line.
  void Finish();

  struct Pending {
    std::vector<std::string> lines;
    int64_t dropped = 0;       // lines dropped before these
    int64_t time_unix_ms = 0;  // when the newest of them was read
  };
  // The oldest unshipped lines, up to about `max_bytes`; nothing is removed.
  Pending Peek(size_t max_bytes) const;
  // The first `lines` lines of the last Peek (and the drop count it reported) were shipped.
  void Commit(size_t lines, int64_t dropped);
  // True once the input ended and every line was shipped (or dropped).
  bool Drained() const;
  // Waits up to `timeout` for the input to end. Returns whether it did.
  bool WaitForEnd(absl::Duration timeout) const;

  // The last `max_bytes` of the rank's output on disk (both files), whole lines.
  std::string Tail(size_t max_bytes) const;
  const std::string& path() const { return options_.path; }

 private:
  explicit RankLog(const Options& options, std::FILE* file) : options_(options), file_(file) {}
  void Read(int fd);
  void AppendLocked(absl::string_view data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueLineLocked(std::string line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RotateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  int64_t file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string partial_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_read_ms_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reader_;
};

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_RANK_LOG_H_
