// Smoke test: the generated Coordinator service compiles against Debian's gRPC, and a real
// in-process server on a loopback port answers a real client (with a deadline, as every client
// call in Shardline carries).
#include <chrono>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace {

class OneWorkerService final : public shardline::Coordinator::Service {
  grpc::Status ListWorkers(grpc::ServerContext*, const shardline::ListWorkersRequest*,
                           shardline::ListWorkersResponse* response) override {
    shardline::WorkerInfo* w = response->add_workers();
    w->set_node_name("node-a");
    w->add_slots()->set_kind(shardline::Slot::CPU);
    return grpc::Status::OK;
  }
  grpc::Status SubmitJob(grpc::ServerContext*, const shardline::SubmitJobRequest* request,
                         shardline::SubmitJobResponse*) override {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "world_size: " + std::to_string(request->spec().world_size()));
  }
};

TEST(GrpcSmoke, ClientAndServerRoundTripOnLoopback) {
  OneWorkerService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto stub = shardline::Coordinator::NewStub(channel);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  shardline::ListWorkersResponse workers;
  ASSERT_TRUE(stub->ListWorkers(&ctx, shardline::ListWorkersRequest(), &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).node_name(), "node-a");

  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  shardline::SubmitJobRequest submit;
  submit.mutable_spec()->set_world_size(-3);
  shardline::SubmitJobResponse ignored;
  const grpc::Status s = stub->SubmitJob(&ctx2, submit, &ignored);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "world_size: -3");
  server->Shutdown();
}

}  // namespace
