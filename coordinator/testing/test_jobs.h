// What the coordinator's integration tests (coordinator_integration_test, auth_integration_test)
// submit and register against a real coordinator: a small valid job spec, a CPU worker's
// registration, and paths under the test's temporary directory.
//
// Thread safety: pure functions (TestTmpPath reads $TEST_TMPDIR).
#ifndef SHARDLINE_COORDINATOR_TESTING_TEST_JOBS_H_
#define SHARDLINE_COORDINATOR_TESTING_TEST_JOBS_H_

#include <string>

#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// $TEST_TMPDIR/<name>.
std::string TestTmpPath(const std::string& name);

// A GPT spec of one tiny layer that passes spec::Validate (the coordinator does not check
// files): `world_size` CPU ranks, 10 steps, micro batch 2 per rank, checkpoints in /ckpt.
JobSpec TestJobSpec(const std::string& name, int world_size = 1, int max_restarts = 0);

// A worker on `node` (address 127.0.0.1) with `slots` CPU slots named "cpu".
RegisterWorkerRequest TestWorkerRequest(const std::string& node, int slots);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_TESTING_TEST_JOBS_H_
