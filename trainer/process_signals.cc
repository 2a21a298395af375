#include "trainer/process_signals.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "common/logging.h"

namespace shardline::trainer {
namespace {

std::atomic<int> g_stop_signal{0};

void OnSignal(int signo) { g_stop_signal.store(signo); }

}  // namespace

void InstallStopSignals() {
  const char* ignore_term = std::getenv("SHARDLINE_TEST_IGNORE_SIGTERM");  // tests only
  const bool ignore = ignore_term != nullptr && std::string(ignore_term) == "1";
  if (ignore) SL_LOG(WARNING) << "SHARDLINE_TEST_IGNORE_SIGTERM=1: ignoring SIGTERM (tests only)";
  signal(SIGTERM, ignore ? SIG_IGN : OnSignal);
  signal(SIGINT, OnSignal);
}

int StopSignal() { return g_stop_signal.load(); }

}  // namespace shardline::trainer
