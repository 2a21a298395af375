// Raw gRPC bad-input table against a REAL, running coordinator: requests shardctl would never
// send (it validates locally first), sent straight to the service with hand-built protos.
// Each row names the call, the status code it must get and a substring of the message that names
// the field, file or value at fault. After every row the fixture checks that the coordinator
// still serves (ListJobs answers) and that the finished reference job -- its status, history and
// checkpoint records -- is exactly what it was before the row.
//
// Driven by tests/integration/bad_input_test.py, which starts the coordinator (with a user token
// and a worker join token) and a real worker daemon, runs a real job to SUCCEEDED with committed
// checkpoints, and then runs this binary:
//
//   bad_input_raw_test --coordinator=HOST:PORT --user_token=U --worker_token=W --done_job=job-1
//
// For the reports and rendezvous rows this binary plays a fake GPU worker: it registers a node
// with two CUDA slots (the real workers offer CPU slots only), submits a two-rank CUDA job that
// only it can run, acknowledges both ranks in its heartbeats and so holds a RUNNING attempt with
// a rendezvous namespace whose secret it knows. The job is cancelled at the end.
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.grpc.pb.h"
#include "spec/job_spec.h"

namespace shardline {
namespace {

struct Flags {
  std::string coordinator;
  std::string user_token;
  std::string worker_token;
  std::string done_job;
};
Flags flags;

std::shared_ptr<grpc::Channel> channel;
std::unique_ptr<Coordinator::Stub> stub;

// The fake GPU worker's state (set up once by the environment below).
std::string fake_worker_id;
std::string fake_job_id;
std::string fake_namespace;
std::string fake_secret;
int32_t fake_attempt = 0;

// STARTs the fake worker received (its ranks); every heartbeat of the fake worker must list them
// all, or the coordinator fails the attempt as RANK_LOST.
absl::Mutex fake_mu;
std::vector<Assignment> fake_starts ABSL_GUARDED_BY(fake_mu);
// Job ids of the STOPs the fake worker received.
std::vector<std::string> fake_stops ABSL_GUARDED_BY(fake_mu);

HeartbeatRequest FakeHeartbeat() {
  HeartbeatRequest hb;
  hb.set_worker_id(fake_worker_id);
  absl::MutexLock lock(&fake_mu);
  for (const Assignment& a : fake_starts) {
    RankStatus* rs = hb.add_ranks();
    rs->set_job_id(a.job_id());
    rs->set_attempt(a.attempt());
    rs->set_rank(a.rank());
    rs->set_state(RankStatus::RUNNING);
  }
  return hb;
}

// Snapshot of the finished reference job, compared after every row.
std::string done_job_snapshot;
std::string done_checkpoints_snapshot;

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token, int timeout_s = 10) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s));
  return ctx;
}
// The fake worker's credential (RegisterWorker's answer) and the fake job's attempt credential
// (its rendezvous secret, from its START).
std::string fake_worker_credential;
std::unique_ptr<grpc::ClientContext> User() { return Ctx(flags.user_token); }
// The daemon's calls: the join token and the worker's own credential.
std::unique_ptr<grpc::ClientContext> Worker(int timeout_s = 10) {
  auto ctx = Ctx(flags.worker_token, timeout_s);
  if (!fake_worker_credential.empty()) {
    ctx->AddMetadata("x-shardline-worker-credential", fake_worker_credential);
  }
  return ctx;
}
// A trainer's calls: the fake job's attempt credential is its token.
std::unique_ptr<grpc::ClientContext> Attempt() { return Ctx(fake_secret); }

// A complete, valid CPU spec as shardctl would send it (parsed, defaulted, validated); rows
// break one field of it. No file checks: the coordinator does not make them either.
JobSpec ValidSpec() {
  spec::LoadOptions o;
  o.validate.check_files = false;
  auto s = spec::LoadJobSpecText(R"(
name: bad-input-base
world_size: 4
model: {architecture: GPT, preset: tiny}
data: {path: /nonexistent/corpus.txt, format: TEXT, seq_len: 32}
fsdp: {sharding_strategy: HYBRID_SHARD, hybrid_shard_degree: 2}
train: {steps: 2, global_batch_size: 8, micro_batch_size: 2}
device: {kind: CPU}
)",
                                 "base", o);
  if (!s.ok()) {
    ADD_FAILURE() << "base spec: " << s.status();
    return JobSpec();
  }
  return *s;
}

grpc::Status Submit(const JobSpec& spec, const std::string& token, std::string* id = nullptr) {
  SubmitJobRequest req;
  *req.mutable_spec() = spec;
  SubmitJobResponse resp;
  auto ctx = Ctx(token);
  grpc::Status s = stub->SubmitJob(ctx.get(), req, &resp);
  if (id != nullptr) *id = resp.job_id();
  return s;
}

grpc::Status SubmitWith(const std::function<void(JobSpec*)>& edit) {
  JobSpec spec = ValidSpec();
  edit(&spec);
  std::string id;
  grpc::Status s = Submit(spec, flags.user_token, &id);
  // A row that wrongly gets through must not leave a job waiting for slots behind it.
  if (s.ok() && !id.empty()) {
    CancelJobRequest c;
    c.set_job_id(id);
    CancelJobResponse r;
    (void)stub->CancelJob(User().get(), c, &r);
  }
  return s;
}

// A SubmitJob in the spec_text form (what the Python client sends), cancelled if it gets through.
grpc::Status SubmitText(const std::string& text, const std::vector<std::string>& overrides,
                        const std::string& base_dir,
                        const std::function<void(SubmitJobRequest*)>& edit = nullptr) {
  SubmitJobRequest req;
  req.set_spec_text(text);
  for (const std::string& o : overrides) req.add_overrides(o);
  req.set_base_dir(base_dir);
  if (edit) edit(&req);
  SubmitJobResponse resp;
  grpc::Status s = stub->SubmitJob(User().get(), req, &resp);
  if (s.ok() && !resp.job_id().empty()) {
    CancelJobRequest c;
    c.set_job_id(resp.job_id());
    CancelJobResponse r;
    (void)stub->CancelJob(User().get(), c, &r);
  }
  return s;
}

constexpr char kTextSpec[] = R"(
name: bad-input-text
world_size: 4
model: {preset: tiny}
data: {path: corpus.txt, seq_len: 32}
train: {steps: 2, micro_batch_size: 2}
)";

ProgressReport Progress(const std::string& job, int32_t attempt, int32_t rank) {
  ProgressReport r;
  r.set_job_id(job);
  r.set_attempt(attempt);
  r.set_rank(rank);
  r.set_step(1);
  r.set_loss(1.0);
  return r;
}
grpc::Status SendProgress(const ProgressReport& r) {
  ReportProgressResponse resp;
  return stub->ReportProgress(Attempt().get(), r, &resp);
}

CheckpointReport CkptReport(const std::string& job, int32_t attempt, int32_t rank, int64_t step,
                            const std::string& path) {
  CheckpointReport r;
  r.set_job_id(job);
  r.set_attempt(attempt);
  r.set_rank(rank);
  r.set_step(step);
  r.set_path(path);
  r.add_files(absl::StrCat("shard_", rank, ".bin"));
  r.set_expected_files(2);
  return r;
}
grpc::Status SendCkpt(const CheckpointReport& r) {
  ReportCheckpointResponse resp;
  return stub->ReportCheckpoint(Attempt().get(), r, &resp);
}

grpc::Status RvSet(const std::string& ns, const std::string& secret, const std::string& key,
                   const std::string& value, const std::string& token) {
  RendezvousSetRequest req;
  req.set_namespace_(ns);
  req.set_secret(secret);
  req.set_key(key);
  req.set_value(value);
  RendezvousSetResponse resp;
  return stub->RendezvousSet(Ctx(token).get(), req, &resp);
}
grpc::Status RvGet(const std::string& ns, const std::string& secret,
                   const std::vector<std::string>& keys, int32_t timeout_ms) {
  RendezvousGetRequest req;
  req.set_namespace_(ns);
  req.set_secret(secret);
  for (const std::string& k : keys) req.add_keys(k);
  req.set_timeout_ms(timeout_ms);
  RendezvousGetResponse resp;
  return stub->RendezvousGet(Attempt().get(), req, &resp);
}

RegisterWorkerRequest FakeNode(const std::string& name, int slots) {
  RegisterWorkerRequest req;
  req.set_node_name(name);
  req.set_address("127.0.0.1");
  for (int i = 0; i < slots; ++i) {
    Slot* s = req.add_slots();
    s->set_kind(Slot::CUDA);
    s->set_index(i);
    s->set_device_name("fake GPU (bad-input test)");
  }
  return req;
}
grpc::Status Register(const RegisterWorkerRequest& req, const std::string& token) {
  RegisterWorkerResponse resp;
  return stub->RegisterWorker(Ctx(token).get(), req, &resp);
}

// ------------------------------------------------------------------- the fake GPU worker

class FakeGpuWorker : public ::testing::Environment {
 public:
  void SetUp() override {
    RegisterWorkerResponse reg;
    grpc::Status s = stub->RegisterWorker(Worker().get(), FakeNode("bad-input-fake-gpu", 2), &reg);
    ASSERT_TRUE(s.ok()) << "register fake worker: " << s.error_message();
    fake_worker_id = reg.worker_id();
    fake_worker_credential = reg.worker_credential();
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
    stream_ctx_ = Worker(3600);
    stream_ = std::thread([this] { StreamLoop(); });

    JobSpec spec = ValidSpec();
    spec.set_name("bad-input-fake-gpu-job");
    spec.set_world_size(2);
    spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
    spec.mutable_fsdp()->set_hybrid_shard_degree(0);
    spec.mutable_train()->set_global_batch_size(4);
    spec.mutable_device()->set_kind(DeviceSpec::CUDA);
    s = Submit(spec, flags.user_token, &fake_job_id);
    ASSERT_TRUE(s.ok()) << "submit fake GPU job: " << s.error_message();

    // Both STARTs, from the stream.
    {
      absl::MutexLock lock(&fake_mu);
      auto two = []() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fake_mu) { return fake_starts.size() >= 2; };
      ASSERT_TRUE(fake_mu.AwaitWithTimeout(absl::Condition(&two), absl::Seconds(30)))
          << "the fake GPU job was not placed on the fake worker";
      fake_namespace = fake_starts[0].rendezvous_namespace();
      fake_secret = fake_starts[0].rendezvous_secret();
      fake_attempt = fake_starts[0].attempt();
    }
    // Wait until a heartbeat acknowledged both ranks, so the job is RUNNING.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    JobStatus st;
    while (std::chrono::steady_clock::now() < deadline) {
      GetJobRequest g;
      g.set_job_id(fake_job_id);
      st.Clear();
      if (stub->GetJob(User().get(), g, &st).ok() && st.state() == RUNNING) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(st.state(), RUNNING) << st.DebugString();
  }

  void TearDown() override {
    CancelJobRequest c;
    c.set_job_id(fake_job_id);
    c.set_reason("bad-input test done");
    CancelJobResponse r;
    grpc::Status s = stub->CancelJob(User().get(), c, &r);
    EXPECT_TRUE(s.ok()) << "cancel fake GPU job: " << s.error_message();
    stop_ = true;
    if (stream_ctx_) stream_ctx_->TryCancel();
    if (heartbeat_.joinable()) heartbeat_.join();
    if (stream_.joinable()) stream_.join();
  }

 private:
  void HeartbeatLoop() {
    while (!stop_) {
      HeartbeatResponse resp;
      (void)stub->Heartbeat(Worker().get(), FakeHeartbeat(), &resp);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  }
  void StreamLoop() {
    StreamAssignmentsRequest req;
    req.set_worker_id(fake_worker_id);
    auto reader = stub->StreamAssignments(stream_ctx_.get(), req);
    Assignment a;
    while (reader->Read(&a)) {
      absl::MutexLock lock(&fake_mu);
      if (a.action() == Assignment::START) fake_starts.push_back(a);
      if (a.action() == Assignment::STOP) {
        fake_stops.push_back(a.job_id());
        if (a.job_id() == fake_job_id) fake_starts.clear();
      }
    }
    (void)reader->Finish();
  }

  std::atomic<bool> stop_{false};
  std::unique_ptr<grpc::ClientContext> stream_ctx_;
  std::thread heartbeat_;
  std::thread stream_;
};

std::string DoneJobNow() {
  GetJobRequest g;
  g.set_job_id(flags.done_job);
  JobStatus st;
  grpc::Status s = stub->GetJob(User().get(), g, &st);
  return s.ok() ? st.SerializeAsString() : "error: " + s.error_message();
}
std::string DoneCheckpointsNow() {
  ListCheckpointsRequest req;
  req.set_job_id(flags.done_job);
  ListCheckpointsResponse resp;
  grpc::Status s = stub->ListCheckpoints(User().get(), req, &resp);
  return s.ok() ? resp.SerializeAsString() : "error: " + s.error_message();
}

// ------------------------------------------------------------------- the table

struct Row {
  std::string name;
  std::function<grpc::Status()> call;
  grpc::StatusCode code;
  std::string message;  // substring of the status message
};

// gtest prints a failing row by its name, not as bytes.
void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

std::string Big(size_t n, char c = 'x') { return std::string(n, c); }

std::vector<Row> Rows() {
  using C = grpc::StatusCode;
  std::vector<Row> r;
  // ---- tokens
  // ---- the spec_text form: resolved by the coordinator with spec::LoadJobSpecText
  r.push_back({"SpecTextRelativePathWithoutBaseDir", [] { return SubmitText(kTextSpec, {}, ""); },
               C::INVALID_ARGUMENT,
               "data.path: relative path \"corpus.txt\" cannot be resolved without a base "
               "directory"});
  r.push_back({"SpecTextRelativeBaseDir", [] { return SubmitText(kTextSpec, {}, "rel/dir"); },
               C::INVALID_ARGUMENT, "base_dir: \"rel/dir\" is not an absolute path"});
  r.push_back({"SpecTextBadOverride",
               [] { return SubmitText(kTextSpec, {"model.n_head=5"}, "/data"); },
               C::INVALID_ARGUMENT, "model.n_embd: 64 is not divisible by model.n_head 5"});
  r.push_back({"SpecTextUnknownField",
               [] { return SubmitText(kTextSpec, {"fsdp.shard_degre=2"}, "/data"); },
               C::INVALID_ARGUMENT, "fsdp.shard_degre"});
  r.push_back({"SpecTextUnknownPreset",
               [] { return SubmitText("model: {preset: huge}\n", {}, "/data"); },
               C::INVALID_ARGUMENT, "huge"});
  r.push_back({"SpecTextAndSpecBoth",
               [] {
                 return SubmitText(kTextSpec, {}, "/data",
                                   [](SubmitJobRequest* q) { *q->mutable_spec() = ValidSpec(); });
               },
               C::INVALID_ARGUMENT, "spec and spec_text are both set"});
  r.push_back({"OverridesWithoutSpecText",
               [] {
                 return SubmitText("", {"train.steps=3"}, "",
                                   [](SubmitJobRequest* q) { *q->mutable_spec() = ValidSpec(); });
               },
               C::INVALID_ARGUMENT, "overrides and base_dir apply to spec_text"});
  r.push_back({"SubmitWithoutToken", [] { return Submit(ValidSpec(), ""); }, C::UNAUTHENTICATED,
               "missing \"authorization: Bearer <token>\""});
  r.push_back({"SubmitWithWrongToken", [] { return Submit(ValidSpec(), "not-the-token"); },
               C::UNAUTHENTICATED, "wrong user token"});
  r.push_back({"SubmitWithWorkerJoinToken", [] { return Submit(ValidSpec(), flags.worker_token); },
               C::UNAUTHENTICATED, "wrong user token"});
  r.push_back({"RegisterWorkerWithUserToken",
               [] { return Register(FakeNode("intruder", 1), flags.user_token); },
               C::UNAUTHENTICATED, "wrong worker join token"});
  r.push_back({"ListJobsWithBasicAuthScheme",
               [] {
                 auto ctx = std::make_unique<grpc::ClientContext>();
                 ctx->AddMetadata("authorization", "Basic " + flags.user_token);
                 ListJobsResponse resp;
                 return stub->ListJobs(ctx.get(), ListJobsRequest(), &resp);
               },
               C::UNAUTHENTICATED, "wrong user token"});
  // Rendezvous and reports take only an attempt credential (issue #14): not a user's token, not
  // the join token.
  r.push_back({"RendezvousSetWithUserToken",
               [] { return RvSet(fake_namespace, fake_secret, "k", "v", flags.user_token); },
               C::UNAUTHENTICATED, "RendezvousSet needs the credential of a running job attempt"});
  r.push_back({"RendezvousSetWithWorkerJoinToken",
               [] { return RvSet(fake_namespace, fake_secret, "k", "v", flags.worker_token); },
               C::UNAUTHENTICATED, "RendezvousSet needs the credential of a running job attempt"});
  r.push_back({"ProgressWithWorkerJoinToken",
               [] {
                 ReportProgressResponse resp;
                 return stub->ReportProgress(Ctx(flags.worker_token).get(),
                                             Progress(fake_job_id, fake_attempt, 0), &resp);
               },
               C::UNAUTHENTICATED, "ReportProgress needs the credential of a running job attempt"});
  r.push_back({"CheckpointWithUserToken",
               [] {
                 CheckpointReport c =
                     CkptReport(fake_job_id, fake_attempt, 0, 1000000000000, "/tmp/forged/step");
                 c.set_manifest_committed(true);
                 c.set_expected_files(1);
                 ReportCheckpointResponse resp;
                 return stub->ReportCheckpoint(User().get(), c, &resp);
               },
               C::UNAUTHENTICATED,
               "ReportCheckpoint needs the credential of a running job attempt"});
  r.push_back({"HeartbeatWithoutWorkerCredential",
               [] {
                 HeartbeatResponse resp;
                 return stub->Heartbeat(Ctx(flags.worker_token).get(), FakeHeartbeat(), &resp);
               },
               C::UNAUTHENTICATED, "missing \"x-shardline-worker-credential\" metadata"});
  r.push_back({"HeartbeatWithAWrongWorkerCredential",
               [] {
                 auto ctx = Ctx(flags.worker_token);
                 ctx->AddMetadata("x-shardline-worker-credential", fake_secret);
                 HeartbeatResponse resp;
                 return stub->Heartbeat(ctx.get(), FakeHeartbeat(), &resp);
               },
               C::PERMISSION_DENIED, "worker credential does not match worker"});
  // ---- job specs that bypass shardctl's local validation
  r.push_back({"SubmitEmptySpec", [] { return Submit(JobSpec(), flags.user_token); },
               C::INVALID_ARGUMENT, "name: \"\" must be 1-64 characters of [a-zA-Z0-9._-]"});
  r.push_back({"SubmitWorldSizeZero",
               [] { return SubmitWith([](JobSpec* s) { s->set_world_size(0); }); },
               C::INVALID_ARGUMENT, "world_size: 0 must be positive"});
  r.push_back({"SubmitWorldSizeNegative",
               [] { return SubmitWith([](JobSpec* s) { s->set_world_size(-4); }); },
               C::INVALID_ARGUMENT, "world_size: -4 must be positive"});
  r.push_back({"SubmitNameWithSlash",
               [] { return SubmitWith([](JobSpec* s) { s->set_name("../../etc"); }); },
               C::INVALID_ARGUMENT,
               "name: \"../../etc\" must be 1-64 characters of [a-zA-Z0-9._-]"});
  r.push_back({"SubmitName65Chars",
               [] { return SubmitWith([](JobSpec* s) { s->set_name(Big(65, 'n')); }); },
               C::INVALID_ARGUMENT, "name: \"" + Big(65, 'n') + "\" must be 1-64 characters"});
  r.push_back(
      {"SubmitShardDegreeNotDividingWorld",
       [] { return SubmitWith([](JobSpec* s) { s->mutable_fsdp()->set_hybrid_shard_degree(3); }); },
       C::INVALID_ARGUMENT, "hybrid_shard_degree: 3 does not divide world_size 4"});
  r.push_back(
      {"SubmitShardDegreeAboveWorld",
       [] { return SubmitWith([](JobSpec* s) { s->mutable_fsdp()->set_hybrid_shard_degree(8); }); },
       C::INVALID_ARGUMENT, "hybrid_shard_degree: 8"});
  r.push_back({"SubmitUnknownShardingStrategyNumber",
               [] {
                 return SubmitWith([](JobSpec* s) {
                   s->mutable_fsdp()->set_hybrid_shard_degree(0);
                   s->mutable_fsdp()->set_sharding_strategy(
                       static_cast<FsdpSpec::ShardingStrategy>(99));
                 });
               },
               C::INVALID_ARGUMENT, "99"});
  // Fields this coordinator's JobSpec does not define (protobuf would keep them and the job
  // would carry them into every START) are refused, named by path and number.
  r.push_back({"SubmitUnknownFieldNumber",
               [] {
                 return SubmitWith([](JobSpec* s) {
                   s->mutable_train()
                       ->GetReflection()
                       ->MutableUnknownFields(s->mutable_train())
                       ->AddLengthDelimited(4242, std::string(1 << 20, 'x'));
                 });
               },
               C::INVALID_ARGUMENT, "train.#4242: unknown field"});
  r.push_back(
      {"SubmitMinWorldAboveWorld",
       [] { return SubmitWith([](JobSpec* s) { s->mutable_elastic()->set_min_world_size(5); }); },
       C::INVALID_ARGUMENT, "elastic.min_world_size: 5"});
  r.push_back(
      {"SubmitNegativeMaxRestarts",
       [] { return SubmitWith([](JobSpec* s) { s->mutable_restart()->set_max_restarts(-1); }); },
       C::INVALID_ARGUMENT, "restart.max_restarts"});
  r.push_back({"SubmitNoDeviceKind",
               [] { return SubmitWith([](JobSpec* s) { s->mutable_device()->clear_kind(); }); },
               C::INVALID_ARGUMENT, "device.kind: must be CPU or CUDA"});
  r.push_back(
      {"SubmitNaNLearningRate",
       [] { return SubmitWith([](JobSpec* s) { s->mutable_optimizer()->set_lr(std::nan("")); }); },
       C::INVALID_ARGUMENT, "optimizer.lr: nan must be > 0"});
  r.push_back({"SubmitDropoutOutOfRange",
               [] { return SubmitWith([](JobSpec* s) { s->mutable_model()->set_dropout(1.5f); }); },
               C::INVALID_ARGUMENT, "model.dropout: 1.5 is not in [0, 1)"});
  r.push_back({"SubmitZeroSteps",
               [] { return SubmitWith([](JobSpec* s) { s->mutable_train()->set_steps(0); }); },
               C::INVALID_ARGUMENT, "train.steps: 0 must be positive"});
  r.push_back({"SubmitHugeWorldSize",
               [] {
                 return SubmitWith(
                     [](JobSpec* s) { s->set_world_size(std::numeric_limits<int32_t>::max()); });
               },
               C::INVALID_ARGUMENT, "world_size"});
  r.push_back({"SubmitTorchscriptPathOnGpt",
               [] {
                 return SubmitWith(
                     [](JobSpec* s) { s->mutable_model()->set_torchscript_path("/tmp/m.pt"); });
               },
               C::INVALID_ARGUMENT, "model.torchscript_path: \"/tmp/m.pt\" is only used with"});
  r.push_back({"SubmitMegabyteName",
               [] { return SubmitWith([](JobSpec* s) { s->set_name(Big(1 << 20, 'n')); }); },
               // The message shows the first 512 bytes of the name, not a megabyte.
               C::INVALID_ARGUMENT,
               "name: \"" + Big(512, 'n') + "... (1048576 bytes)\" must be 1-64 characters"});
  r.push_back({"SubmitMegabyteTorchscriptPath",
               [] {
                 return SubmitWith([](JobSpec* s) {
                   s->mutable_model()->set_torchscript_path("/" + Big(1 << 20));
                 });
               },
               C::INVALID_ARGUMENT, "model.torchscript_path"});
  r.push_back({"SubmitSpecOverMessageLimit",
               [] {
                 return SubmitWith(
                     [](JobSpec* s) { s->mutable_train()->set_sample_prompt(Big(5 << 20)); });
               },
               C::RESOURCE_EXHAUSTED, "Received message larger than max"});
  // ---- worker calls
  r.push_back({"RegisterWorkerEmptyNodeName",
               [] { return Register(FakeNode("", 1), flags.worker_token); }, C::INVALID_ARGUMENT,
               "node_name must not be empty"});
  r.push_back({"RegisterWorkerNoSlots",
               [] { return Register(FakeNode("no-slots-node", 0), flags.worker_token); },
               C::INVALID_ARGUMENT, "slots must not be empty (node no-slots-node)"});
  r.push_back({"RegisterWorkerDuplicateSlotIndex",
               [] {
                 RegisterWorkerRequest req = FakeNode("dup-slot-node", 2);
                 req.mutable_slots(1)->set_index(0);
                 return Register(req, flags.worker_token);
               },
               C::INVALID_ARGUMENT, "duplicate index 0 on node dup-slot-node"});
  r.push_back({"RegisterWorkerSlotWithoutKind",
               [] {
                 RegisterWorkerRequest req = FakeNode("kindless-node", 1);
                 req.mutable_slots(0)->clear_kind();
                 return Register(req, flags.worker_token);
               },
               C::INVALID_ARGUMENT, "slots[0].kind must be CPU or CUDA"});
  r.push_back({"StreamAssignmentsUnknownWorker",
               [] {
                 StreamAssignmentsRequest req;
                 req.set_worker_id("w-no-such-worker");
                 auto ctx = Worker();
                 auto reader = stub->StreamAssignments(ctx.get(), req);
                 Assignment a;
                 while (reader->Read(&a)) {
                 }
                 return reader->Finish();
               },
               C::NOT_FOUND, "unknown worker w-no-such-worker"});
  // A heartbeat from a stranger is not an error: it is told to register (reregister = true).
  r.push_back({"HeartbeatUnknownWorkerIsToldToRegister",
               [] {
                 HeartbeatRequest hb;
                 hb.set_worker_id("w-no-such-worker");
                 HeartbeatResponse resp;
                 grpc::Status s = stub->Heartbeat(Worker().get(), hb, &resp);
                 if (s.ok() && !resp.reregister()) {
                   return grpc::Status(grpc::StatusCode::INTERNAL, "reregister not set");
                 }
                 return s.ok() ? grpc::Status(grpc::StatusCode::OK, "reregister") : s;
               },
               C::OK, ""});
  // The fake worker claims rank 0 of the finished reference job failed: ignored (a worker speaks
  // only for ranks placed on it, and the job is over); the fixture checks the job is unchanged.
  r.push_back({"HeartbeatSpoofsRankOfAnotherWorkersJob",
               [] {
                 HeartbeatRequest hb = FakeHeartbeat();  // its own ranks, as always
                 RankStatus* rs = hb.add_ranks();
                 rs->set_job_id(flags.done_job);
                 rs->set_attempt(1);
                 rs->set_rank(0);
                 rs->set_state(RankStatus::EXITED);
                 rs->set_exit_code(1);
                 HeartbeatResponse resp;
                 return stub->Heartbeat(Worker().get(), hb, &resp);
               },
               C::OK, ""});
  // The fake worker claims to run a rank of a job that does not exist: not an error, but the
  // coordinator tells it to stop that rank (a STOP for the job arrives on its stream).
  r.push_back({"HeartbeatListsRankOfUnknownJobGetsAStop",
               [] {
                 HeartbeatRequest hb = FakeHeartbeat();
                 RankStatus* rs = hb.add_ranks();
                 rs->set_job_id("job-999999");
                 rs->set_attempt(1);
                 rs->set_rank(0);
                 rs->set_state(RankStatus::RUNNING);
                 HeartbeatResponse resp;
                 grpc::Status s = stub->Heartbeat(Worker().get(), hb, &resp);
                 if (!s.ok()) return s;
                 absl::MutexLock lock(&fake_mu);
                 auto stopped = []() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fake_mu) {
                   return std::find(fake_stops.begin(), fake_stops.end(), "job-999999") !=
                          fake_stops.end();
                 };
                 if (!fake_mu.AwaitWithTimeout(absl::Condition(&stopped), absl::Seconds(10))) {
                   return grpc::Status(grpc::StatusCode::INTERNAL, "no STOP for job-999999");
                 }
                 return grpc::Status::OK;
               },
               C::OK, ""});
  // ---- reports from ranks
  // A report for a job or attempt its credential does not belong to is refused before the core
  // looks the job up (issue #14).
  r.push_back({"ProgressUnknownJob", [] { return SendProgress(Progress("job-999999", 1, 0)); },
               C::PERMISSION_DENIED, "may not report for job job-999999 attempt 1"});
  r.push_back({"ProgressForFinishedJob",
               [] { return SendProgress(Progress(flags.done_job, 1, 0)); }, C::PERMISSION_DENIED,
               "may not report for job " + flags.done_job + " attempt 1"});
  r.push_back({"ProgressRankOutsideWorld",
               [] { return SendProgress(Progress(fake_job_id, fake_attempt, 7)); },
               C::INVALID_ARGUMENT, "rank: 7 outside world of 2"});
  r.push_back({"ProgressNegativeRank",
               [] { return SendProgress(Progress(fake_job_id, fake_attempt, -1)); },
               C::INVALID_ARGUMENT, "rank: -1 outside world of 2"});
  r.push_back({"ProgressWrongAttempt",
               [] { return SendProgress(Progress(fake_job_id, fake_attempt + 5, 0)); },
               C::PERMISSION_DENIED, " may not report for job "});
  r.push_back({"ProgressNegativeStep",
               [] {
                 ProgressReport p = Progress(fake_job_id, fake_attempt, 0);
                 p.set_step(-5);
                 return SendProgress(p);
               },
               C::INVALID_ARGUMENT, "step and peak_memory_bytes must be >= 0, got step -5"});
  r.push_back({"CheckpointForgedCommitOfFinishedJob",
               [] {
                 CheckpointReport c = CkptReport(flags.done_job, 1, 0, 999, "/tmp/forged/step_999");
                 c.set_manifest_committed(true);
                 c.set_expected_files(1);
                 return SendCkpt(c);
               },
               C::PERMISSION_DENIED, "may not report for job " + flags.done_job + " attempt 1"});
  r.push_back({"CheckpointUnknownJob",
               [] { return SendCkpt(CkptReport("job-999999", 1, 0, 2, "/tmp/x/step_2")); },
               C::PERMISSION_DENIED, "may not report for job job-999999 attempt 1"});
  r.push_back(
      {"CheckpointNegativeStep",
       [] { return SendCkpt(CkptReport(fake_job_id, fake_attempt, 0, -3, "/tmp/fake/step_-3")); },
       C::INVALID_ARGUMENT, "step must be >= 0, got -3"});
  r.push_back({"CheckpointEmptyPath",
               [] { return SendCkpt(CkptReport(fake_job_id, fake_attempt, 0, 4, "")); },
               C::INVALID_ARGUMENT, "path must not be empty"});
  r.push_back(
      {"CheckpointRelativePath",
       [] { return SendCkpt(CkptReport(fake_job_id, fake_attempt, 0, 4, "../ckpt/step_4")); },
       C::INVALID_ARGUMENT, "path must be absolute, got \"../ckpt/step_4\""});
  r.push_back(
      {"CheckpointFileNameEscapesTheStepDir",
       [] {
         CheckpointReport c = CkptReport(fake_job_id, fake_attempt, 0, 4, "/tmp/fake/step_4");
         c.set_files(0, "../../etc/passwd");
         return SendCkpt(c);
       },
       C::INVALID_ARGUMENT, "file \"../../etc/passwd\" is not a file name in the step directory"});
  r.push_back({"CheckpointNegativeExpectedFiles",
               [] {
                 CheckpointReport c =
                     CkptReport(fake_job_id, fake_attempt, 0, 4, "/tmp/fake/step_4");
                 c.set_expected_files(-2);
                 return SendCkpt(c);
               },
               C::INVALID_ARGUMENT, "expected_files must be >= 0, got -2"});
  r.push_back({"CheckpointPathChangesBetweenReports",
               [] {
                 grpc::Status first =
                     SendCkpt(CkptReport(fake_job_id, fake_attempt, 0, 6, "/tmp/fake/step_6"));
                 if (!first.ok()) return first;
                 return SendCkpt(
                     CkptReport(fake_job_id, fake_attempt, 1, 6, "/tmp/elsewhere/step_6"));
               },
               C::INVALID_ARGUMENT, "path /tmp/elsewhere/step_6 differs from /tmp/fake/step_6"});
  r.push_back({"CheckpointNewFileAfterCommit",
               [] {
                 CheckpointReport a =
                     CkptReport(fake_job_id, fake_attempt, 0, 8, "/tmp/fake/step_8");
                 a.add_files("shard_1.bin");
                 a.add_files("MANIFEST.json");
                 a.set_manifest_committed(true);
                 grpc::Status s = SendCkpt(a);
                 if (!s.ok()) return s;
                 CheckpointReport b =
                     CkptReport(fake_job_id, fake_attempt, 1, 8, "/tmp/fake/step_8");
                 b.set_files(0, "sneaked_in.bin");
                 return SendCkpt(b);
               },
               C::FAILED_PRECONDITION, "new file sneaked_in.bin reported after the commit"});
  // ---- rendezvous
  r.push_back({"RendezvousSetWrongSecret",
               [] { return RvSet(fake_namespace, "wrong-secret", "k", "v", fake_secret); },
               C::PERMISSION_DENIED, "wrong secret"});
  r.push_back({"RendezvousGetWrongSecret",
               [] { return RvGet(fake_namespace, "wrong-secret", {"k"}, 0); }, C::PERMISSION_DENIED,
               "wrong secret"});
  // Another namespace than the credential's attempt: refused before the store looks it up.
  r.push_back({"RendezvousSetUnknownNamespace",
               [] { return RvSet("job-999999/1", fake_secret, "k", "v", fake_secret); },
               C::PERMISSION_DENIED, "may only use rendezvous namespace"});
  r.push_back({"RendezvousGetFinishedJobsNamespace",
               [] { return RvGet(flags.done_job + "/1", "any", {"k"}, 0); }, C::PERMISSION_DENIED,
               "not " + flags.done_job + "/1"});
  r.push_back({"RendezvousSetEmptyKey",
               [] { return RvSet(fake_namespace, fake_secret, "", "v", fake_secret); },
               C::INVALID_ARGUMENT, "rendezvous key must not be empty"});
  r.push_back({"RendezvousGetNegativeTimeout",
               [] { return RvGet(fake_namespace, fake_secret, {"k"}, -1); }, C::INVALID_ARGUMENT,
               "timeout_ms: must be >= 0, got -1"});
  r.push_back({"RendezvousSetValueOverStoreLimit",
               [] { return RvSet(fake_namespace, fake_secret, "big", Big(2 << 20), fake_secret); },
               C::RESOURCE_EXHAUSTED, "rendezvous value for big has 2097152 bytes; limit"});
  r.push_back(
      {"RendezvousSetKeyOverLimit",
       [] { return RvSet(fake_namespace, fake_secret, Big(64 << 10, 'k'), "v", fake_secret); },
       C::RESOURCE_EXHAUSTED, "rendezvous key of 65536 bytes; limit 4096"});
  r.push_back({"RendezvousSetOverMessageLimit",
               [] { return RvSet(fake_namespace, fake_secret, "huge", Big(5 << 20), fake_secret); },
               C::RESOURCE_EXHAUSTED, "Received message larger than max"});
  r.push_back({"RendezvousGetMissingKeyTimesOut",
               [] { return RvGet(fake_namespace, fake_secret, {"never-set"}, 200); },
               C::DEADLINE_EXCEEDED, "keys [never-set] missing after"});
  // ---- jobs and checkpoints
  r.push_back({"GetUnknownJob",
               [] {
                 GetJobRequest g;
                 g.set_job_id("job-999999");
                 JobStatus st;
                 return stub->GetJob(User().get(), g, &st);
               },
               C::NOT_FOUND, "unknown job job-999999"});
  r.push_back({"CancelFinishedJob",
               [] {
                 CancelJobRequest c;
                 c.set_job_id(flags.done_job);
                 CancelJobResponse resp;
                 return stub->CancelJob(User().get(), c, &resp);
               },
               C::FAILED_PRECONDITION, "SUCCEEDED"});
  r.push_back({"WatchUnknownJob",
               [] {
                 WatchJobRequest w;
                 w.set_job_id("job-999999");
                 auto ctx = User();
                 auto reader = stub->WatchJob(ctx.get(), w);
                 JobStatus st;
                 while (reader->Read(&st)) {
                 }
                 return reader->Finish();
               },
               C::NOT_FOUND, "unknown job job-999999"});
  r.push_back({"GetCheckpointStepNotRecorded",
               [] {
                 GetCheckpointRequest g;
                 g.set_job_id(flags.done_job);
                 g.set_step(12345);
                 GetCheckpointResponse resp;
                 return stub->GetCheckpoint(User().get(), g, &resp);
               },
               C::NOT_FOUND, "at step 12345"});
  // Logs and training metrics (issue 16): the worker-side ShipLogs and the user-side reads.
  r.push_back({"ShipLogsWithUserToken",
               [] {
                 ShipLogsRequest req;
                 ShipLogsResponse resp;
                 return stub->ShipLogs(User().get(), req, &resp);
               },
               C::UNAUTHENTICATED, "wrong worker join token"});
  r.push_back({"ShipLogsOfAnAttemptNotStarted",
               [] {
                 ShipLogsRequest req;
                 RankLogChunk* c = req.add_chunks();
                 c->set_job_id(flags.done_job);
                 c->set_attempt(9);
                 c->add_lines("forged");
                 ShipLogsResponse resp;
                 return stub->ShipLogs(Worker().get(), req, &resp);
               },
               C::INVALID_ARGUMENT, "attempt 9 has not started"});
  r.push_back({"GetLogsWithWorkerToken",
               [] {
                 GetLogsRequest g;
                 g.set_job_id(flags.done_job);
                 GetLogsResponse resp;
                 return stub->GetLogs(Worker().get(), g, &resp);
               },
               C::UNAUTHENTICATED, "wrong user token"});
  r.push_back({"GetLogsNegativeTail",
               [] {
                 GetLogsRequest g;
                 g.set_job_id(flags.done_job);
                 g.set_tail_lines(-5);
                 GetLogsResponse resp;
                 return stub->GetLogs(User().get(), g, &resp);
               },
               C::INVALID_ARGUMENT, "tail_lines -5"});
  r.push_back({"GetJobMetricsUnknownJob",
               [] {
                 GetJobMetricsRequest g;
                 g.set_job_id("job-999999");
                 GetJobMetricsResponse resp;
                 return stub->GetJobMetrics(User().get(), g, &resp);
               },
               C::NOT_FOUND, "unknown job job-999999"});
  return r;
}

class RawBadInput : public ::testing::TestWithParam<Row> {
 protected:
  void TearDown() override {
    // The coordinator still serves ...
    ListJobsResponse jobs;
    grpc::Status s = stub->ListJobs(User().get(), ListJobsRequest(), &jobs);
    ASSERT_TRUE(s.ok()) << "coordinator stopped serving after " << GetParam().name << ": "
                        << s.error_message();
    // ... and the finished job and its checkpoint records are untouched.
    EXPECT_EQ(DoneJobNow(), done_job_snapshot) << "reference job changed";
    EXPECT_EQ(DoneCheckpointsNow(), done_checkpoints_snapshot) << "checkpoint records changed";
  }
};

TEST_P(RawBadInput, GetsItsStatusAndMessage) {
  const Row& row = GetParam();
  const grpc::Status s = row.call();
  EXPECT_EQ(s.error_code(), row.code)
      << row.name << ": got code " << s.error_code() << " \"" << s.error_message() << "\"";
  EXPECT_TRUE(absl::StrContains(s.error_message(), row.message))
      << row.name << ": message \"" << s.error_message().substr(0, 500) << "\" lacks \""
      << row.message << "\"";
  // Messages name the problem; they do not echo megabytes of input back.
  EXPECT_LT(s.error_message().size(), 4096u) << row.name;
}

INSTANTIATE_TEST_SUITE_P(Table, RawBadInput, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.name; });

}  // namespace
}  // namespace shardline

int main(int argc, char** argv) {
  using shardline::flags;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto take = [&a](const char* name, std::string* out) {
      const std::string prefix = absl::StrCat("--", name, "=");
      if (!absl::StartsWith(a, prefix)) return false;
      *out = a.substr(prefix.size());
      return true;
    };
    if (take("coordinator", &flags.coordinator) || take("user_token", &flags.user_token) ||
        take("worker_token", &flags.worker_token) || take("done_job", &flags.done_job)) {
      continue;
    }
    rest.push_back(argv[i]);
  }
  int n = static_cast<int>(rest.size());
  ::testing::InitGoogleTest(&n, rest.data());
  if (flags.coordinator.empty() || flags.done_job.empty()) {
    std::cerr << "usage: bad_input_raw_test --coordinator=HOST:PORT --user_token=U "
                 "--worker_token=W --done_job=JOB (run by bad_input_test.py)\n";
    return 2;
  }
  shardline::channel = grpc::CreateChannel(flags.coordinator, grpc::InsecureChannelCredentials());
  shardline::stub = shardline::Coordinator::NewStub(shardline::channel);
  shardline::done_job_snapshot = shardline::DoneJobNow();
  shardline::done_checkpoints_snapshot = shardline::DoneCheckpointsNow();
  ::testing::AddGlobalTestEnvironment(new shardline::FakeGpuWorker());
  return RUN_ALL_TESTS();
}
