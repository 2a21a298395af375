#include "common/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace shardline {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  // The message travels in trailing metadata, which clients cap (8 KiB by default): a longer one
  // (a message echoing a megabyte-long field) reaches the client as "metadata size exceeds
  // limit" instead of the error. Cut it, keeping the start, which names the field.
  constexpr size_t kMaxMessageBytes = 2048;
  if (message.size() > kMaxMessageBytes) {
    const size_t total = message.size();
    message.resize(kMaxMessageBytes);
    absl::StrAppend(&message, "... (", total - kMaxMessageBytes, " more bytes cut)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::move(message));
}

absl::Status FromGrpcStatus(const grpc::Status& status, const char* context) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (context == nullptr) return absl::Status(code, status.error_message());
  return absl::Status(code, absl::StrCat(context, ": ", status.error_message()));
}

}  // namespace shardline
