#include "checkpoint/mapped_read_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace shardline::checkpoint {
namespace {

struct Guard {
  uintptr_t lo = 0, hi = 0;
  sigjmp_buf env;
};

// The innermost guard of this thread. Set (so its TLS slot exists) before any guarded read;
// the handler only reads it.
thread_local Guard* t_guard = nullptr;

struct sigaction g_previous;
std::once_flag g_installed;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  Guard* g = t_guard;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (g != nullptr && info->si_code == BUS_ADRERR && addr >= g->lo && addr < g->hi) {
    siglongjmp(g->env, 1);
  }
  // Not a guarded read: what would have happened without this handler.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
    if (g_previous.sa_sigaction != nullptr &&
        reinterpret_cast<void*>(g_previous.sa_sigaction) != reinterpret_cast<void*>(SIG_IGN)) {
      g_previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: returning re-runs the faulting access, which now kills the process
  // with SIGBUS as before.
  ::signal(SIGBUS, SIG_DFL);
}

void Install() {
  struct sigaction sa = {};
  sa.sa_sigaction = OnSigbus;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  ::sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

bool GuardMappedRead(const void* addr, size_t len, absl::FunctionRef<void()> read) {
  std::call_once(g_installed, Install);
  Guard g;
  g.lo = reinterpret_cast<uintptr_t>(addr);
  g.hi = g.lo + len;
  Guard* const outer = t_guard;
  // sigsetjmp(.., 1) saves the signal mask, so the siglongjmp out of the handler unblocks
  // SIGBUS again.
  if (sigsetjmp(g.env, 1) != 0) {
    t_guard = outer;
    return false;
  }
  t_guard = &g;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  read();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = outer;
  return true;
}

}  // namespace shardline::checkpoint
