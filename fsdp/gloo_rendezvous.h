// Bootstrap of a GlooCommunicator: binds a Gloo TCP device and connects the group's full mesh of
// pairs through the group's KvStore. Implementation of GlooCommunicator, not for other callers
// (a private header of //fsdp:gloo_communicator).
//
// Thread safety: ConnectGlooMesh may run on any thread; it blocks until every peer has
// connected or the timeout passes.
#ifndef SHARDLINE_FSDP_GLOO_RENDEZVOUS_H_
#define SHARDLINE_FSDP_GLOO_RENDEZVOUS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "fsdp/gloo_communicator.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/device.h"

namespace shardline::fsdp::gloo_internal {

// A connected group: the context's pairs run on the device, so both live as long as the
// communicator.
struct GlooMesh {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

// Connects `options.rank` to every peer of the group, `options` as validated by
// GlooCommunicator::Create. Errors, prefixed "group <name> op connect step 0: ": the store's own
// status, DEADLINE_EXCEEDED / UNAVAILABLE if the peers do not all show up within the timeout.
// Ignores SIGPIPE process-wide on first use (see gloo_rendezvous.cc for why).
absl::StatusOr<GlooMesh> ConnectGlooMesh(const GlooCommunicator::Options& options);

}  // namespace shardline::fsdp::gloo_internal

#endif  // SHARDLINE_FSDP_GLOO_RENDEZVOUS_H_
