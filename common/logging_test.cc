#include "common/logging.h"

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace shardline {
namespace {

// The line SL_LOG writes for `level` with prefix "rank 3", read back from stderr.
std::string LoggedLine(LogLevel level, const std::string& message) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const int saved = dup(STDERR_FILENO);
  dup2(fds[1], STDERR_FILENO);
  SetLogPrefix("rank 3");
  if (level == LogLevel::ERROR) {
    SL_LOG(ERROR) << message;
  } else {
    SL_LOG(INFO) << message;
  }
  SetLogPrefix("");
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fds[0]);
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST(LogLineMessage, StripsThisLoggersPrefixAndKeepsOtherLinesWhole) {
  // What the logger writes, with and without the source location (non-INFO lines have it); a
  // "] " inside the message stays.
  const std::string error = LoggedLine(LogLevel::ERROR, "training: peer lost] at step 3");
  ASSERT_NE(error, "training: peer lost] at step 3");  // it has a prefix to strip
  EXPECT_EQ(LogLineMessage(error), "training: peer lost] at step 3");
  EXPECT_EQ(LogLineMessage(LoggedLine(LogLevel::INFO, "step 1")), "step 1");
  // Lines from elsewhere (a Python traceback, a plain message) are kept whole.
  for (const char* other : {"RuntimeError: boom", "E: not a log line ] x", "I12 3 ] short", ""}) {
    EXPECT_EQ(LogLineMessage(other), other);
  }
}

}  // namespace
}  // namespace shardline
