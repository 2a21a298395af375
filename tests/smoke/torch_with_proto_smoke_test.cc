// Smoke test: a translation unit that includes both LibTorch and generated protobuf code sees
// Debian's protobuf headers (the version libprotobuf.so was built from), not the copy the torch
// wheel carries in its include/google; and a JobSpec round-trips through its JSON form.
#include <ATen/ATen.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/util/json_util.h>

#include "gtest/gtest.h"
#include "proto/job_spec.pb.h"

namespace {

TEST(TorchWithProto, HeadersMatchTheLinkedProtobuf) {
  // 3.21.x, as Debian 12's libprotobuf32.
  EXPECT_EQ(GOOGLE_PROTOBUF_VERSION / 1000, 3021);
  shardline::JobSpec spec;
  spec.set_world_size(4);
  spec.mutable_fsdp()->set_sharding_strategy(shardline::FsdpSpec::HYBRID_SHARD);
  spec.mutable_fsdp()->set_hybrid_shard_degree(2);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
  shardline::JobSpec back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_EQ(back.SerializeAsString(), spec.SerializeAsString());
  EXPECT_EQ(at::ones({2}).sum().item<float>(), 2.0f);
}

}  // namespace
