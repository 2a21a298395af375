// PrefixKvStore: a view of another KvStore whose keys all start with "<prefix>/", so several
// groups (world, shard[g], replicate[j]) or several attempts of a job bootstrap through one
// store without their keys colliding. Errors name the full (prefixed) keys, which says which
// group was waiting.
//
// Thread safety: as thread-safe as the wrapped store. Does not own it; it must outlive this.
#ifndef SHARDLINE_FSDP_PREFIX_KV_STORE_H_
#define SHARDLINE_FSDP_PREFIX_KV_STORE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "fsdp/kv_store.h"

namespace shardline::fsdp {

class PrefixKvStore : public KvStore {
 public:
  PrefixKvStore(KvStore* base, absl::string_view prefix);

  const std::string& prefix() const { return prefix_; }

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override;

 private:
  KvStore* const base_;
  const std::string prefix_;  // Includes the trailing '/'.
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_PREFIX_KV_STORE_H_
