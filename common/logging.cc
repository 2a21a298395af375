#include "common/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "absl/strings/ascii.h"

namespace shardline {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("SHARDLINE_LOG_LEVEL");
  if (env == nullptr) return LogLevel::INFO;
  if (std::strcmp(env, "DEBUG") == 0) return LogLevel::DEBUG;
  if (std::strcmp(env, "WARNING") == 0) return LogLevel::WARNING;
  if (std::strcmp(env, "ERROR") == 0) return LogLevel::ERROR;
  return LogLevel::INFO;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

std::mutex& PrefixMu() {
  static std::mutex mu;
  return mu;
}

std::string& Prefix() {
  static std::string prefix;
  return prefix;
}

}  // namespace

void SetLogPrefix(absl::string_view prefix) {
  std::lock_guard<std::mutex> lock(PrefixMu());
  Prefix() = std::string(prefix.data(), prefix.size());
}

// Each line's first character, by LogLevel.
constexpr char kLevelLetters[] = "DIWE";

absl::string_view LogLineMessage(absl::string_view line) {
  // LogMessage's prefix: a level letter, MMDD, a space, ..., "] " (within the first 160 bytes:
  // the prefix text is short; a "] " later on is the message's).
  if (line.size() < 8 ||
      absl::string_view(kLevelLetters).find(line[0]) == absl::string_view::npos || line[5] != ' ') {
    return line;
  }
  for (int i = 1; i <= 4; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(line[i]))) return line;
  }
  const size_t end = line.find("] ");
  if (end == absl::string_view::npos || end > 160) return line;
  return line.substr(end + 2);
}

void SetMinLogLevel(LogLevel level) { MinLevel().store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= MinLevel().load(); }

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%c%02d%02d %02d:%02d:%02d.%03d",
                kLevelLetters[static_cast<int>(level)], local.tm_mon + 1, local.tm_mday,
                local.tm_hour, local.tm_min, local.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  const char* base = std::strrchr(file, '/');
  stream_ << stamp << ' ';
  {
    std::lock_guard<std::mutex> lock(PrefixMu());
    if (!Prefix().empty()) stream_ << Prefix() << ' ';
  }
  if (level_ != LogLevel::INFO) stream_ << (base ? base + 1 : file) << ':' << line << ' ';
  stream_ << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  // One write so concurrent lines stay whole; a failed write to stderr has nowhere to go.
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace internal
}  // namespace shardline
