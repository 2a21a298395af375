// ThreadSanitizer annotations for Debian's Abseil synchronization (linked only by
// --config=tsan, through --custom_malloc, into every binary and test).
//
// Why: Debian's libabsl_synchronization.so is not built with -fsanitize=thread, so TSan does not
// see absl::Mutex or absl::CondVar establish happens-before (their fast paths are atomics inside
// the uninstrumented library), and every access guarded by an absl::Mutex -- in our code and in
// gRPC's, whose gpr_mu is an absl::Mutex -- would be reported as a race. This file interposes the
// locking entry points (the executable's definitions win over the shared library's), calls the
// library's own implementation through dlsym(RTLD_NEXT), and tells TSan what happened:
// __tsan_release before a lock is given up, __tsan_acquire after it is (re)taken. It changes no
// behaviour; it only makes TSan see the synchronization that is really there.
//
// Thread safety: each wrapper is as thread-safe as the function it wraps.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#define SHARDLINE_STR2(x) #x
#define SHARDLINE_STR(x) SHARDLINE_STR2(x)

namespace {

// "_ZN4absl" + <inline namespace, length-prefixed> + rest: the library's mangled name.
void* Real(const char* rest) {
  const std::string ns = SHARDLINE_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = "_ZN4absl" + std::to_string(ns.size()) + ns + rest;
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found in the Abseil library\n", name.c_str());
    std::abort();
  }
  return f;
}

template <typename F>
F RealFn(const char* rest) {
  return reinterpret_cast<F>(Real(rest));
}

// The library evaluates a Condition while it holds the lock (in LockWhen/Await, before they
// return to us), so the evaluation must already see the acquire: wrap the condition.
struct AcquireThenEval {
  const absl::Condition* cond;
  absl::Mutex* mu;
  static bool Eval(void* arg) {
    auto* self = static_cast<AcquireThenEval*>(arg);
    __tsan_acquire(self->mu);
    const bool r = self->cond->Eval();
    // What the evaluation read happens before the waiter runs on (it acquires on return).
    __tsan_release(self->mu);
    return r;
  }
};

}  // namespace

// Also the waiter's own state (the wrapper, what the condition reads) must be visible to the
// thread that evaluates it -- the library may do that in the thread that unlocks -- so the waiter
// releases (publishes) before it waits, whether or not it holds the lock yet.
#define SHARDLINE_WRAP_COND(mu, cond)                         \
  AcquireThenEval wrap_ctx{&(cond), (mu)};                    \
  const Condition wrapped(&AcquireThenEval::Eval, &wrap_ctx); \
  __tsan_release(mu)

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool got = real(this);
  if (got) __tsan_acquire(this);
  return got;
}

bool Mutex::ReaderTryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  const bool got = real(this);
  if (got) __tsan_acquire(this);
  return got;
}

void Mutex::Unlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real =
      RealFn<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  SHARDLINE_WRAP_COND(this, cond);
  real(this, wrapped);
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real =
      RealFn<void (*)(Mutex*, const Condition&)>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  SHARDLINE_WRAP_COND(this, cond);
  real(this, wrapped);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  SHARDLINE_WRAP_COND(this, cond);
  const bool r = real(this, wrapped, timeout);
  __tsan_acquire(this);  // Held on return either way.
  return r;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  SHARDLINE_WRAP_COND(this, cond);
  const bool r = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return r;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  SHARDLINE_WRAP_COND(this, cond);
  const bool r = real(this, wrapped, timeout);
  __tsan_acquire(this);
  return r;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  SHARDLINE_WRAP_COND(this, cond);
  const bool r = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return r;
}

// Await* give the lock up while waiting and hold it again on return.
void Mutex::Await(const Condition& cond) {
  static auto real = RealFn<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  SHARDLINE_WRAP_COND(this, cond);
  real(this, wrapped);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  SHARDLINE_WRAP_COND(this, cond);
  const bool r = real(this, wrapped, timeout);
  __tsan_acquire(this);
  return r;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  SHARDLINE_WRAP_COND(this, cond);
  const bool r = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return r;
}

void CondVar::Wait(Mutex* mu) {
  static auto real = RealFn<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool r = real(this, mu, timeout);
  __tsan_acquire(mu);
  return r;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, absl::Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool r = real(this, mu, deadline);
  __tsan_acquire(mu);
  return r;
}

ABSL_NAMESPACE_END
}  // namespace absl
