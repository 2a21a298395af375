// Fuzz target: rendezvous request handling. The input is a RendezvousFuzzInput
// (fuzz/rendezvous_fuzz.proto, binary form): requests go to
//   - a CoordinatorCore (in memory, fake clock) with one running job attempt, through the
//     methods the gRPC service calls (RendezvousSet / RendezvousGet / RendezvousPoll), and
//   - a standalone RendezvousStore with small limits, checked against a plain map model: a
//     value read back is the last value set; errors carry the documented codes.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/testing/fake_clock.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/rendezvous_fuzz.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/coordinator.pb.h"

namespace {

using shardline::coordinator::CoordinatorCore;
using shardline::coordinator::RendezvousStore;

constexpr int kMaxOps = 256;

bool IsStoreCode(absl::StatusCode c) {
  return c == absl::StatusCode::kNotFound || c == absl::StatusCode::kPermissionDenied ||
         c == absl::StatusCode::kDeadlineExceeded || c == absl::StatusCode::kResourceExhausted ||
         c == absl::StatusCode::kInvalidArgument;
}

struct Attempt {
  std::unique_ptr<CoordinatorCore> core;
  std::string ns, secret;
};

// A core with one worker (one CPU slot) running a one-rank job: its attempt's namespace is open.
Attempt StartAttempt(const shardline::Clock* clock) {
  shardline::coordinator::CoreOptions o;
  o.clock = clock;
  auto core = CoordinatorCore::Create(o);
  FUZZ_CHECK(core.ok(), core.status().ToString());
  shardline::RegisterWorkerRequest w;
  w.set_node_name("n");
  w.set_address("n:0");
  shardline::Slot* slot = w.add_slots();
  slot->set_kind(shardline::Slot::CPU);
  slot->set_index(0);
  auto reg = (*core)->RegisterWorker(w);
  FUZZ_CHECK(reg.ok(), reg.status().ToString());
  shardline::JobSpec spec;
  spec.set_name("fuzz");
  spec.set_world_size(1);
  spec.mutable_fsdp()->set_sharding_strategy(shardline::FsdpSpec::FULL_SHARD);
  spec.mutable_train()->set_steps(1);
  auto job = (*core)->SubmitJob(spec);
  FUZZ_CHECK(job.ok(), job.status().ToString());
  auto gen = (*core)->OpenAssignmentStream(reg->worker_id());
  FUZZ_CHECK(gen.ok(), gen.status().ToString());
  shardline::Assignment a;
  auto got = (*core)->NextAssignment(reg->worker_id(), *gen, absl::ZeroDuration(), &a);
  FUZZ_CHECK(got.ok() && *got && !a.rendezvous_namespace().empty(), "no START assignment");
  return Attempt{std::move(*core), a.rendezvous_namespace(), a.rendezvous_secret()};
}

// The standalone store and its model.
class ModelStore {
 public:
  explicit ModelStore(RendezvousStore::Limits limits) : store_(limits), limits_(limits) {}

  void Open(const std::string& ns, const std::string& secret) {
    store_.Open(ns, secret);
    model_[ns] = {secret, {}};
  }
  void Close(const std::string& ns) {
    store_.Close(ns);
    model_.erase(ns);
  }
  void Set(const std::string& ns, const std::string& secret, const std::string& key,
           const std::string& value) {
    const absl::Status s = store_.Set(ns, secret, key, value);
    // The store checks the request itself first, then the namespace and secret, then room.
    if (key.empty()) {
      FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, "Set empty key: " + s.ToString());
      return;
    }
    if (key.size() > limits_.max_key_bytes) {
      FUZZ_CHECK(s.code() == absl::StatusCode::kResourceExhausted,
                 "Set oversized key: " + s.ToString());
      return;
    }
    if (value.size() > limits_.max_value_bytes) {
      FUZZ_CHECK(s.code() == absl::StatusCode::kResourceExhausted,
                 "Set oversized value: " + s.ToString());
      return;
    }
    auto it = model_.find(ns);
    if (it == model_.end()) {
      FUZZ_CHECK(s.code() == absl::StatusCode::kNotFound, "Set on unknown ns: " + s.ToString());
      return;
    }
    if (it->second.first != secret) {
      FUZZ_CHECK(s.code() == absl::StatusCode::kPermissionDenied,
                 "Set with a wrong secret: " + s.ToString());
      return;
    }
    std::map<std::string, std::string>& values = it->second.second;
    if (values.size() >= limits_.max_keys_per_namespace && values.count(key) == 0) {
      FUZZ_CHECK(s.code() == absl::StatusCode::kResourceExhausted,
                 "Set past max_keys_per_namespace: " + s.ToString());
      return;
    }
    FUZZ_CHECK(s.ok(), "Set refused a valid request: " + s.ToString());
    values[key] = value;
  }
  void Get(const std::string& ns, const std::string& secret, const std::vector<std::string>& keys) {
    auto got = store_.Get(ns, secret, keys, absl::ZeroDuration());
    if (keys.size() > limits_.max_keys_per_namespace) {
      FUZZ_CHECK(got.status().code() == absl::StatusCode::kResourceExhausted,
                 "Get of more keys than a namespace holds: " + got.status().ToString());
      return;
    }
    // Keys are checked in order; the first empty, oversized or repeated one decides.
    std::set<std::string> seen;
    for (const std::string& k : keys) {
      if (k.empty()) {
        FUZZ_CHECK(got.status().code() == absl::StatusCode::kInvalidArgument,
                   "Get with an empty key: " + got.status().ToString());
        return;
      }
      if (k.size() > limits_.max_key_bytes) {
        FUZZ_CHECK(got.status().code() == absl::StatusCode::kResourceExhausted,
                   "Get with an oversized key: " + got.status().ToString());
        return;
      }
      if (!seen.insert(k).second) {
        FUZZ_CHECK(got.status().code() == absl::StatusCode::kInvalidArgument,
                   "Get with a repeated key: " + got.status().ToString());
        return;
      }
    }
    auto it = model_.find(ns);
    if (it == model_.end()) {
      FUZZ_CHECK(got.status().code() == absl::StatusCode::kNotFound,
                 "Get on unknown ns: " + got.status().ToString());
      return;
    }
    if (it->second.first != secret) {
      FUZZ_CHECK(got.status().code() == absl::StatusCode::kPermissionDenied,
                 "Get with a wrong secret: " + got.status().ToString());
      return;
    }
    bool all_there = true;
    size_t response_bytes = 0;
    for (const std::string& k : keys) {
      auto v = it->second.second.find(k);
      all_there &= v != it->second.second.end();
      if (v != it->second.second.end()) response_bytes += v->second.size();
    }
    if (response_bytes > limits_.max_response_bytes) {
      FUZZ_CHECK(got.status().code() == absl::StatusCode::kResourceExhausted,
                 "Get past max_response_bytes: " + got.status().ToString());
      return;
    }
    if (!all_there) {
      FUZZ_CHECK(got.status().code() == absl::StatusCode::kDeadlineExceeded,
                 "Get with a key never set: " + got.status().ToString());
      return;
    }
    FUZZ_CHECK(got.ok(), "Get failed though every key is set: " + got.status().ToString());
    FUZZ_CHECK(got->size() == keys.size(), "Get returned another number of values");
    for (size_t i = 0; i < keys.size(); ++i) {
      FUZZ_CHECK((*got)[i] == it->second.second.at(keys[i]), "Get returned a stale value");
    }
  }

 private:
  RendezvousStore store_;
  const RendezvousStore::Limits limits_;
  // ns -> (secret, values)
  std::map<std::string, std::pair<std::string, std::map<std::string, std::string>>> model_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardline::fuzz::RendezvousFuzzInput input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (input.ops_size() > kMaxOps) return 0;

  static shardline::FakeClock* clock = [] {
    shardline::SetMinLogLevel(shardline::LogLevel::WARNING);  // Job start-up lines, per input.
    google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" for every mutated string.
    return new shardline::FakeClock();
  }();
  Attempt attempt = StartAttempt(clock);
  RendezvousStore::Limits limits;
  limits.max_value_bytes = 1 + input.max_value_bytes() % 4096;
  limits.max_keys_per_namespace = 1 + input.max_keys() % 64;
  // One to four values' worth: small enough that a get of a few keys meets it.
  limits.max_response_bytes = limits.max_value_bytes * (1 + input.max_keys() % 4);
  ModelStore store(limits);
  store.Open(attempt.ns, attempt.secret);

  for (shardline::fuzz::RendezvousOp op : input.ops()) {
    auto fix = [&](auto* req) {
      if (op.attempt_namespace()) req->set_namespace_(attempt.ns);
      if (op.attempt_secret()) req->set_secret(attempt.secret);
    };
    switch (op.op_case()) {
      case shardline::fuzz::RendezvousOp::kSet: {
        fix(op.mutable_set());
        const shardline::RendezvousSetRequest& req = op.set();
        const absl::Status s = attempt.core->RendezvousSet(req);
        FUZZ_CHECK(s.ok() || IsStoreCode(s.code()), "core RendezvousSet: " + s.ToString());
        store.Set(req.namespace_(), req.secret(), req.key(), req.value());
        break;
      }
      case shardline::fuzz::RendezvousOp::kGet:
      case shardline::fuzz::RendezvousOp::kPoll: {
        const bool poll = op.op_case() == shardline::fuzz::RendezvousOp::kPoll;
        shardline::RendezvousGetRequest* req = poll ? op.mutable_poll() : op.mutable_get();
        fix(req);
        if (req->timeout_ms() > 0) req->set_timeout_ms(0);  // A fuzz input must not block.
        auto got = poll ? attempt.core->RendezvousPoll(*req, absl::Seconds(1))
                        : attempt.core->RendezvousGet(*req);
        if (got.ok()) {
          FUZZ_CHECK(got->values_size() == req->keys_size(), "core Get value count");
        } else {
          FUZZ_CHECK(IsStoreCode(got.status().code()),
                     "core RendezvousGet: " + got.status().ToString());
        }
        std::vector<std::string> keys(req->keys().begin(), req->keys().end());
        store.Get(req->namespace_(), req->secret(), keys);
        break;
      }
      case shardline::fuzz::RendezvousOp::kClose:
        store.Close(op.close());
        break;
      case shardline::fuzz::RendezvousOp::kOpen:
        fix(op.mutable_open());
        store.Open(op.open().namespace_(), op.open().secret());
        break;
      case shardline::fuzz::RendezvousOp::OP_NOT_SET:
        break;
    }
  }
  return 0;
}
