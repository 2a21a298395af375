#include "common/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace shardline {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, const char* context) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (context == nullptr) return absl::Status(code, status.error_message());
  return absl::Status(code, absl::StrCat(context, ": ", status.error_message()));
}

}  // namespace shardline
