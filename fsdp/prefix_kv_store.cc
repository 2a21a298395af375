#include "fsdp/prefix_kv_store.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardline::fsdp {

PrefixKvStore::PrefixKvStore(KvStore* base, absl::string_view prefix)
    : base_(base), prefix_(absl::StrCat(prefix, "/")) {}

absl::Status PrefixKvStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(absl::StrCat(prefix_, key), value);
}

absl::StatusOr<std::vector<std::string>> PrefixKvStore::Get(const std::vector<std::string>& keys,
                                                            absl::Duration timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(absl::StrCat(prefix_, key));
  return base_->Get(full, timeout);
}

}  // namespace shardline::fsdp
