#include "coordinator/rendezvous/rendezvous_rpc.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {
namespace {

absl::StatusOr<RendezvousGetResponse> Lookup(RendezvousStore* store,
                                             const RendezvousGetRequest& req,
                                             absl::Duration timeout, absl::Duration reported) {
  std::vector<std::string> keys(req.keys().begin(), req.keys().end());
  auto values = store->Get(req.namespace_(), req.secret(), keys, timeout, reported);
  if (!values.ok()) return values.status();
  RendezvousGetResponse resp;
  for (std::string& v : *values) resp.add_values(std::move(v));
  return resp;
}

}  // namespace

absl::Duration RendezvousWaitFor(const RendezvousGetRequest& req, absl::Duration max_wait) {
  return std::min(absl::Milliseconds(std::max(0, req.timeout_ms())), max_wait);
}

absl::Status ServeRendezvousSet(RendezvousStore* store, const RendezvousSetRequest& req) {
  return store->Set(req.namespace_(), req.secret(), req.key(), req.value());
}

absl::StatusOr<RendezvousGetResponse> ServeRendezvousGet(RendezvousStore* store,
                                                         const RendezvousGetRequest& req,
                                                         absl::Duration max_wait) {
  if (req.timeout_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: must be >= 0, got ", req.timeout_ms()));
  }
  return Lookup(store, req, RendezvousWaitFor(req, max_wait), absl::InfiniteDuration());
}

absl::StatusOr<RendezvousGetResponse> ServeRendezvousPoll(RendezvousStore* store,
                                                          const RendezvousGetRequest& req,
                                                          absl::Duration waited) {
  return Lookup(store, req, absl::ZeroDuration(), waited);
}

}  // namespace shardline::coordinator
