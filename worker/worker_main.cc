// worker: the Shardline node daemon. See worker/worker_daemon.h.
//
//   worker --coordinator=HOST:PORT --slots=2 --work_dir=/var/lib/shardline/worker \
//          --trainer=/usr/local/bin/trainer [--node_name=NAME] [--address=IP] \
//          --join_token_file=/etc/shardline/join.token [--trainer_user=shardline-trainer] \
//          [--tls_ca=ca.pem [--tls_cert=node.pem --tls_key=node.key]] [--insecure]
//
// The join token: --join_token_file (mode 0600), else $SHARDLINE_JOIN_TOKEN; --join_token puts
// it in the process list and is for tests. Without --tls_ca the worker refuses to send it to a
// non-loopback coordinator unless --insecure.
//
// Exit codes: 0 after SIGTERM/SIGINT (every rank stopped first); 2 for bad flags.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/secret_file.h"
#include "launch/env_names.h"
#include "worker/worker_daemon.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address host:port (or $SHARDLINE_COORDINATOR).");
ABSL_FLAG(std::string, join_token, "",
          "Worker join token (visible in the process list: prefer --join_token_file or "
          "$SHARDLINE_JOIN_TOKEN).");
ABSL_FLAG(std::string, join_token_file, "",
          "File holding the worker join token (mode 0600; or $SHARDLINE_JOIN_TOKEN).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA file to verify the coordinator's certificate: connect with TLS.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate of this node (mutual TLS; its name must be --node_name).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(bool, insecure, false,
          "Allow sending the join token without TLS to a non-loopback coordinator (trusted "
          "networks only).");
ABSL_FLAG(std::string, node_name, "", "Unique node name; default: the host name.");
ABSL_FLAG(std::string, address, "127.0.0.1", "Address other nodes reach this node at.");
ABSL_FLAG(int, slots, 0, "CPU slots to offer when the node has no GPU.");
ABSL_FLAG(std::string, work_dir, "", "Directory for job files and rank logs.");
ABSL_FLAG(std::string, trainer, "",
          "Path of the trainer binary; default: ../trainer/trainer (Bazel's layout) if "
          "present, else beside this binary.");
ABSL_FLAG(std::string, read_roots, "",
          "comma-separated directories job specs may read data, models and weights under on this "
          "node (empty: anywhere; see spec/path_policy.h)");
ABSL_FLAG(std::string, checkpoint_roots, "",
          "comma-separated directories a job's checkpoint.dir must lie under (empty: anywhere)");
ABSL_FLAG(std::string, trainer_user, "",
          "Unprivileged Unix user to run trainers as (the daemon must be root): job code then "
          "cannot read the join token or the node's TLS key. Empty: the daemon's own user.");
ABSL_FLAG(int, grace_period_s, 10, "Seconds between SIGTERM and SIGKILL when stopping ranks.");
ABSL_FLAG(int, rank_log_max_mib, 16,
          "Disk a rank's log may use: rank-N.log rotates to rank-N.log.1 at half of this.");
ABSL_FLAG(
    bool, check_flags, false,
    "Parse and check the flags (not this machine's GPUs or paths), then exit (deploy tests).");

namespace {

std::string Default(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(env);
  return v != nullptr ? v : "";
}

// Bazel's layout first (bazel-bin/worker/worker -> bazel-bin/trainer/trainer), so that a stale
// bazel-bin/worker/trainer from before the trainer moved to trainer/ is never picked; then an
// install dir (/usr/local/bin/worker -> /usr/local/bin/trainer).
std::string TrainerBesideSelf() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string self(buf, n);
  const std::string dir = self.substr(0, self.rfind('/'));
  const std::string bazel_layout = dir + "/../trainer/trainer";
  if (access(bazel_layout.c_str(), X_OK) == 0) return bazel_layout;
  return dir + "/trainer";
}

}  // namespace

int main(int argc, char** argv) {
  // Block SIGTERM/SIGINT before any thread exists (gRPC starts threads when the client is
  // created), so every thread inherits the mask and only the sigwait thread below takes them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  absl::SetProgramUsageMessage(
      "Shardline worker daemon: runs trainer processes for the coordinator.");
  absl::ParseCommandLine(argc, argv);
  shardline::SetLogPrefix("worker");

  shardline::worker::WorkerOptions o;
  o.coordinator_address = Default(absl::GetFlag(FLAGS_coordinator), "SHARDLINE_COORDINATOR");
  if (!absl::GetFlag(FLAGS_join_token).empty() && !absl::GetFlag(FLAGS_join_token_file).empty()) {
    std::fprintf(stderr, "worker: give --join_token or --join_token_file, not both\n");
    return 2;
  }
  o.join_token = Default(absl::GetFlag(FLAGS_join_token), shardline::launch::kJoinTokenEnv);
  // The file is read (and its mode checked) on the node it deploys to, not under --check_flags.
  if (!absl::GetFlag(FLAGS_join_token_file).empty() && !absl::GetFlag(FLAGS_check_flags)) {
    auto token =
        shardline::ReadTokenFile(absl::GetFlag(FLAGS_join_token_file), "--join_token_file");
    if (!token.ok()) {
      std::fprintf(stderr, "worker: %s\n", std::string(token.status().message()).c_str());
      return 2;
    }
    o.join_token = *token;
  }
  o.tls = {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_insecure)};
  o.node_name = absl::GetFlag(FLAGS_node_name);
  if (o.node_name.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    o.node_name = host;
  }
  o.advertise_address = absl::GetFlag(FLAGS_address);
  o.cpu_slots = absl::GetFlag(FLAGS_slots);
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.trainer_path =
      absl::GetFlag(FLAGS_trainer).empty() ? TrainerBesideSelf() : absl::GetFlag(FLAGS_trainer);
  o.trainer_user = absl::GetFlag(FLAGS_trainer_user);
  o.credential_files = {absl::GetFlag(FLAGS_join_token_file), absl::GetFlag(FLAGS_tls_key)};
  o.grace_period = absl::Seconds(absl::GetFlag(FLAGS_grace_period_s));
  o.rank_log_max_file_bytes = std::max<int64_t>(1, absl::GetFlag(FLAGS_rank_log_max_mib)) << 19;
  auto read_roots = shardline::spec::ParseRoots("read_roots", absl::GetFlag(FLAGS_read_roots));
  auto checkpoint_roots =
      shardline::spec::ParseRoots("checkpoint_roots", absl::GetFlag(FLAGS_checkpoint_roots));
  for (const auto* r : {&read_roots, &checkpoint_roots}) {
    if (!r->ok()) {
      std::fprintf(stderr, "worker: %s\n", std::string(r->status().message()).c_str());
      return 2;
    }
  }
  o.path_policy.read_roots = *read_roots;
  o.path_policy.checkpoint_roots = *checkpoint_roots;
  o.path_policy.owner = absl::StrCat("worker ", o.node_name);

  if (absl::GetFlag(FLAGS_check_flags)) {
    // The flags alone: this machine's GPUs, trainer binary and directories belong to the node
    // the recipe deploys to.
    if (o.coordinator_address.empty() || o.work_dir.empty()) {
      std::fprintf(stderr, "worker: --coordinator and --work_dir are required\n");
      return 2;
    }
    return 0;
  }
  auto daemon = shardline::worker::WorkerDaemon::Create(o);
  if (!daemon.ok()) {
    std::fprintf(stderr, "worker: %s\n", std::string(daemon.status().message()).c_str());
    return 2;
  }

  shardline::worker::WorkerDaemon* d = daemon->get();
  std::thread signals([set, d] {
    int sig = 0;
    sigwait(&set, &sig);
    SL_LOG(INFO) << "signal " << sig << ": stopping ranks and exiting";
    d->Shutdown();
  });
  signals.detach();
  const absl::Status s = d->Run();
  if (!s.ok()) {
    SL_LOG(ERROR) << s;
    return 1;
  }
  return 0;
}
