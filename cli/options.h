// ShardctlOptions: every setting of one shardctl run, read from its flags once in
// shardctl_main.cc (flags live only there) and passed down to the commands.
//
// Thread safety: a plain value.
#ifndef SHARDLINE_CLI_OPTIONS_H_
#define SHARDLINE_CLI_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/client_tls.h"

namespace shardline::cli {

// Where the coordinator is and how to reach it; empty fields fall back as target.h says.
struct ConnectionOptions {
  std::string coordinator;                     // --coordinator, host:port
  std::string token;                           // --token
  std::string token_file;                      // --token_file
  client::ClientTlsFiles tls;                  // --tls_ca, --tls_cert, --tls_key, --insecure
  std::string config;                          // --config (empty: ~/.shardline/config)
  std::string state_dir = ".cluster";          // --state_dir, the local cluster's
  absl::Duration timeout = absl::Seconds(10);  // --timeout_s, each call's deadline
};

struct ShardctlOptions {
  ConnectionOptions connection;
  bool json = false;  // read commands print JSON
  // cluster up
  int workers = 2;
  int slots = 2;
  // submit
  std::vector<std::string> sets;  // --set path=value, in order
  bool watch = false;
  bool dry_run = false;
  std::string continue_job;  // --continue_job: checkpoint.resume_from from this job's checkpoint
  // logs
  int rank = -1;
  bool all = false;
  bool follow = false;
  int tail = 0;
  std::string since;
  // export, submit --continue_job: the checkpoint step (-1: the newest committed)
  int64_t step = -1;
  std::string out;
  std::string format = "safetensors";
  bool with_optimizer = false;  // export --format=dcp
};

}  // namespace shardline::cli

#endif  // SHARDLINE_CLI_OPTIONS_H_
