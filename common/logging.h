// Minimal leveled logging to stderr (Debian's Abseil 20220623 has no absl/log).
//
//   SetLogPrefix("rank 3");          // once, at start-up
//   SL_LOG(INFO) << "step " << s;    // "I1129 17:03:04.123 rank 3] step 7"
//
// Levels below the threshold set by SetMinLogLevel (or SHARDLINE_LOG_LEVEL=DEBUG|INFO|WARNING|ERROR
// in the environment) cost one comparison. Each message is written with one write(2), so lines
// from threads and processes sharing a file do not interleave.
//
// Thread safety: all functions may be called from any thread.
#ifndef SHARDLINE_COMMON_LOGGING_H_
#define SHARDLINE_COMMON_LOGGING_H_

#include <sstream>
#include <string>
#include "absl/strings/string_view.h"

namespace shardline {

enum class LogLevel { DEBUG = 0, INFO = 1, WARNING = 2, ERROR = 3 };

// Text placed after the timestamp of every line, e.g. "coordinator" or "rank 3".
void SetLogPrefix(absl::string_view prefix);
void SetMinLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

// The message of a line this logger wrote, without its "E1202 08:51:57.690 rank 0
// failure_exits.cc:11 ] " prefix (level and date, time, the SetLogPrefix text, the source for
// non-INFO lines); any other line as it is. For readers that show the message in their own frame
// (the coordinator's failure events name the rank and have their own time).
absl::string_view LogLineMessage(absl::string_view line);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // Writes the line.
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal
}  // namespace shardline

#define SL_LOG(level)                                           \
  if (!::shardline::LogEnabled(::shardline::LogLevel::level)) { \
  } else                                                        \
    ::shardline::internal::LogMessage(::shardline::LogLevel::level, __FILE__, __LINE__).stream()

#endif  // SHARDLINE_COMMON_LOGGING_H_
