// The rendezvous RPCs (RendezvousSet, RendezvousGet) served from a RendezvousStore: the request
// checks, the wait a request gets, and the response. CoordinatorCore reports successful writes
// to its ChangeFeed (the event-driven server re-polls waiting Gets of that namespace).
//
// Errors: the store's (rendezvous_store.h), plus INVALID_ARGUMENT for a negative timeout_ms.
// Thread safety: as RendezvousStore (any thread; Get blocks only its caller).
#ifndef SHARDLINE_COORDINATOR_RENDEZVOUS_RENDEZVOUS_RPC_H_
#define SHARDLINE_COORDINATOR_RENDEZVOUS_RENDEZVOUS_RPC_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// The wait a RendezvousGet request gets: timeout_ms (0 when negative) capped by `max_wait`.
absl::Duration RendezvousWaitFor(const RendezvousGetRequest& req, absl::Duration max_wait);

absl::Status ServeRendezvousSet(RendezvousStore* store, const RendezvousSetRequest& req);
// Waits up to RendezvousWaitFor(req, max_wait) until every key exists.
absl::StatusOr<RendezvousGetResponse> ServeRendezvousGet(RendezvousStore* store,
                                                         const RendezvousGetRequest& req,
                                                         absl::Duration max_wait);
// One non-blocking look: DEADLINE_EXCEEDED while keys are missing, its message naming them and
// `waited` (how long the caller has polled so far).
absl::StatusOr<RendezvousGetResponse> ServeRendezvousPoll(RendezvousStore* store,
                                                          const RendezvousGetRequest& req,
                                                          absl::Duration waited);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_RENDEZVOUS_RENDEZVOUS_RPC_H_
