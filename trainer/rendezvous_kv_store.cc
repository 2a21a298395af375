#include "trainer/rendezvous_kv_store.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace shardline::trainer {
namespace {
// One server-side wait; the server caps longer ones anyway.
constexpr absl::Duration kSlice = absl::Seconds(30);
constexpr absl::Duration kRetryPause = absl::Milliseconds(200);
}  // namespace

absl::Status RendezvousKvStore::Set(absl::string_view key, absl::string_view value) {
  const absl::Time deadline = absl::Now() + set_retry_for_;
  while (true) {
    absl::Status s = client_->RendezvousSet(ns_, secret_, std::string(key), std::string(value));
    if (s.code() != absl::StatusCode::kUnavailable || absl::Now() + kRetryPause >= deadline) {
      return s;
    }
    absl::SleepFor(kRetryPause);
  }
}

absl::StatusOr<std::vector<std::string>> RendezvousKvStore::Get(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    auto values = client_->RendezvousGet(ns_, secret_, keys, std::min(left, kSlice));
    if (values.ok()) return values;
    const absl::StatusCode code = values.status().code();
    const bool retry =
        code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kUnavailable;
    if (!retry || absl::Now() + (code == absl::StatusCode::kUnavailable ? kRetryPause
                                                                        : absl::ZeroDuration()) >=
                      deadline) {
      return values.status();
    }
    if (code == absl::StatusCode::kUnavailable) absl::SleepFor(kRetryPause);
  }
}

}  // namespace shardline::trainer
