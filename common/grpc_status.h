// The one place where gRPC status and absl::Status convert into each other. Codes map one to one
// (both follow google.rpc.Code); the message is kept (cut when very long, see ToGrpcStatus).
//
// Thread safety: pure functions.
#ifndef SHARDLINE_COMMON_GRPC_STATUS_H_
#define SHARDLINE_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace shardline {

// Converts for returning from a gRPC service method. Messages over 2 KiB are cut (with a note of
// how much), so they fit the clients' metadata limit.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Converts a gRPC call's result; `context` (e.g. "SubmitJob") prefixes non-OK messages so the
// caller sees which call failed.
absl::Status FromGrpcStatus(const grpc::Status& status, const char* context = nullptr);

}  // namespace shardline

#endif  // SHARDLINE_COMMON_GRPC_STATUS_H_
