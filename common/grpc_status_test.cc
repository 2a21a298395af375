#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace shardline {
namespace {

TEST(GrpcStatus, RoundTripKeepsCodeAndMessage) {
  const absl::Status original = absl::InvalidArgumentError("fsdp.hybrid_shard_degree: 5");
  const grpc::Status wire = ToGrpcStatus(original);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(FromGrpcStatus(wire), original);
}

TEST(GrpcStatus, ContextPrefixesMessage) {
  const absl::Status s =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"), "SubmitJob");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "SubmitJob: down");
}

TEST(GrpcStatus, LongMessageIsCutToFitTheMetadataLimit) {
  const std::string field = "name: \"" + std::string(1 << 20, 'n') + "\"";
  const grpc::Status wire = ToGrpcStatus(absl::InvalidArgumentError(field));
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(wire.error_message().size(), 2200u);
  EXPECT_EQ(wire.error_message().rfind("name: \"nnn", 0), 0u);
  EXPECT_NE(wire.error_message().find("more bytes cut)"), std::string::npos);
}

TEST(GrpcStatus, OkStaysOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

}  // namespace
}  // namespace shardline
