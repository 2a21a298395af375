#include "coordinator/rendezvous/rendezvous_store.h"

#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/constant_time.h"

namespace shardline::coordinator {

void RendezvousStore::Open(absl::string_view ns, absl::string_view secret) {
  absl::MutexLock lock(&mu_);
  auto it = namespaces_.find(ns);
  if (it != namespaces_.end()) {
    it->second->closed = true;
    if (journal_.drop) journal_.drop(std::string(ns));  // re-created empty
  }
  auto n = std::make_shared<Namespace>();
  n->secret = std::string(secret);
  namespaces_[std::string(ns)] = std::move(n);
}

void RendezvousStore::Close(absl::string_view ns) {
  absl::MutexLock lock(&mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return;
  it->second->closed = true;
  namespaces_.erase(it);
  if (journal_.drop) journal_.drop(std::string(ns));
}

bool RendezvousStore::IsOpen(absl::string_view ns) const {
  absl::MutexLock lock(&mu_);
  return namespaces_.find(ns) != namespaces_.end();
}

absl::StatusOr<std::shared_ptr<RendezvousStore::Namespace>> RendezvousStore::Find(
    absl::string_view ns, absl::string_view secret) const {
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) {
    return absl::NotFoundError(absl::StrCat("rendezvous namespace ", ns, " does not exist"));
  }
  if (!ConstantTimeEquals(it->second->secret, secret)) {
    return absl::PermissionDeniedError(absl::StrCat("rendezvous namespace ", ns, ": wrong secret"));
  }
  return it->second;
}

absl::Status RendezvousStore::CheckKeyAndValue(absl::string_view key,
                                               absl::string_view value) const {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous key must not be empty");
  if (key.size() > limits_.max_key_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous key of ", key.size(), " bytes; limit ", limits_.max_key_bytes));
  }
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous value for ", key, " has ",
                                                     value.size(), " bytes; limit ",
                                                     limits_.max_value_bytes));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::SetLocked(absl::string_view ns, Namespace& space,
                                        absl::string_view key, absl::string_view value) {
  const std::string k(key);
  auto it = space.values.find(k);
  if (space.values.size() >= limits_.max_keys_per_namespace && it == space.values.end()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous namespace ", ns, " holds ", space.values.size(), " keys; limit reached (",
        limits_.max_keys_per_namespace, ", --rendezvous_max_keys_per_namespace)"));
  }
  const size_t old_bytes = it == space.values.end() ? 0 : it->first.size() + it->second.size();
  const size_t new_bytes = space.bytes - old_bytes + key.size() + value.size();
  if (new_bytes > limits_.max_bytes_per_namespace) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous namespace ", ns, " would hold ", new_bytes, " bytes after setting ", key,
        "; limit ", limits_.max_bytes_per_namespace, " (--rendezvous_max_bytes_per_namespace)"));
  }
  space.bytes = new_bytes;
  space.values[k] = std::string(value);
  return absl::OkStatus();
}

absl::Status RendezvousStore::Set(absl::string_view ns, absl::string_view secret,
                                  absl::string_view key, absl::string_view value) {
  if (absl::Status s = CheckKeyAndValue(key, value); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto n = Find(ns, secret);
  if (!n.ok()) return n.status();
  if (absl::Status s = SetLocked(ns, **n, key, value); !s.ok()) return s;
  if (journal_.put) journal_.put(std::string(ns), std::string(key), std::string(value));
  return absl::OkStatus();
}

absl::Status RendezvousStore::Restore(absl::string_view ns, absl::string_view key,
                                      absl::string_view value) {
  if (absl::Status s = CheckKeyAndValue(key, value); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) {
    return absl::NotFoundError(absl::StrCat("rendezvous namespace ", ns, " does not exist"));
  }
  return SetLocked(ns, *it->second, key, value);
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Get(absl::string_view ns,
                                                              absl::string_view secret,
                                                              const std::vector<std::string>& keys,
                                                              absl::Duration timeout,
                                                              absl::Duration reported_wait) {
  if (keys.size() > limits_.max_keys_per_namespace) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous get of ", keys.size(),
                                                     " keys; a namespace holds at most ",
                                                     limits_.max_keys_per_namespace));
  }
  std::set<absl::string_view> distinct;
  for (const std::string& k : keys) {
    if (k.empty()) return absl::InvalidArgumentError("rendezvous key must not be empty");
    if (k.size() > limits_.max_key_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("rendezvous key of ", k.size(), " bytes; limit ", limits_.max_key_bytes));
    }
    if (!distinct.insert(k).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("rendezvous get names key ", k, " more than once"));
    }
  }
  absl::MutexLock lock(&mu_);
  auto found = Find(ns, secret);
  if (!found.ok()) return found.status();
  std::shared_ptr<Namespace> n = *found;
  auto ready = [&]() {
    if (n->closed) return true;
    for (const std::string& k : keys) {
      if (!n->values.count(k)) return false;
    }
    return true;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), std::max(timeout, absl::ZeroDuration()));
  if (n->closed) {
    return absl::AbortedError(
        absl::StrCat("rendezvous namespace ", ns, " was closed (the attempt ended)"));
  }
  std::vector<std::string> missing;
  size_t response_bytes = 0;
  for (const std::string& k : keys) {
    auto it = n->values.find(k);
    if (it == n->values.end()) {
      missing.push_back(k);
    } else {
      response_bytes += it->second.size();
    }
  }
  if (response_bytes > limits_.max_response_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous namespace ", ns, ": the values of ", keys.size(),
                     " keys add up to ", response_bytes, " bytes; limit ",
                     limits_.max_response_bytes, " (--rendezvous_max_response_bytes)"));
  }
  std::vector<std::string> out;
  if (missing.empty()) {
    out.reserve(keys.size());
    for (const std::string& k : keys) out.push_back(n->values.find(k)->second);
  }
  if (!missing.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous namespace ", ns, ": keys [", absl::StrJoin(missing, ", "), "] missing after ",
        absl::FormatDuration(reported_wait == absl::InfiniteDuration() ? timeout : reported_wait)));
  }
  return out;
}

size_t RendezvousStore::namespace_count() const {
  absl::MutexLock lock(&mu_);
  return namespaces_.size();
}

}  // namespace shardline::coordinator
