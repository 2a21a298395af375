// shardctl cluster up|down, workers, whoami: the local cluster and what the coordinator knows of
// workers and of the caller.
#include <iostream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/json_output.h"
#include "cli/local_cluster.h"

namespace shardline::cli {

using client::CoordinatorClient;

int CmdCluster(Session& session, const Args& args) {
  if (args.size() < 3) return session.UsageError("usage: shardctl cluster up|down");
  const std::string dir = session.options().connection.state_dir;
  if (args[2] == "down") {
    const absl::Status s = StopLocalCluster(dir, absl::Seconds(15));
    if (!s.ok()) return session.Fail(s);
    std::cout << "cluster in " << dir << " stopped\n";
    return kOk;
  }
  if (args[2] != "up") return session.UsageError("usage: shardctl cluster up|down");
  ClusterOptions o;
  o.state_dir = dir;
  o.workers = session.options().workers;
  o.slots_per_worker = session.options().slots;
  for (auto [bin, pkg, name] : {std::tuple{&o.coordinator_bin, "coordinator", "coordinator"},
                                std::tuple{&o.worker_bin, "worker", "worker"},
                                std::tuple{&o.trainer_bin, "trainer", "trainer"}}) {
    auto path = FindSiblingBinary(pkg, name);
    if (!path.ok()) return session.Fail(path.status());
    *bin = *path;
  }
  auto info = StartLocalCluster(o);
  if (!info.ok()) return session.Fail(info.status());
  // Wait until every worker registered, so a submit right after `cluster up` can be placed.
  auto client = client::CoordinatorClient::Create(info->coordinator_address, info->token);
  if (!client.ok()) return session.Fail(client.status());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  size_t alive = 0;
  while (absl::Now() < deadline) {
    auto workers = (*client)->ListWorkers();
    alive = 0;
    if (workers.ok()) {
      for (const WorkerInfo& w : *workers) alive += w.state() == WorkerInfo::ALIVE;
    }
    if (alive >= static_cast<size_t>(o.workers)) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (alive < static_cast<size_t>(o.workers)) {
    return session.Fail(absl::DeadlineExceededError(absl::StrCat("only ", alive, " of ", o.workers,
                                                                 " workers registered; see ", dir,
                                                                 "/worker-*/worker.log")));
  }
  std::cout << "cluster up: coordinator " << info->coordinator_address << ", " << o.workers
            << " workers x " << o.slots_per_worker << " CPU slots (state in " << info->state_dir
            << ")\n";
  if (!info->dashboard_address.empty()) {
    std::cout << "dashboard: http://" << info->dashboard_address
              << "/ (sign in at /login with the token "
              << "in " << info->state_dir << "/coordinator/user.token)\n";
  }
  if (!info->metrics_address.empty()) {
    std::cout << "metrics: http://" << info->metrics_address << "/metrics (Prometheus)\n";
  }
  return kOk;
}

int CmdWorkers(Session& session, const Args&) {
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  auto workers = (*client)->ListWorkers();
  if (!workers.ok()) return session.Fail(workers.status());
  if (session.options().json) {
    ListWorkersResponse r;
    for (const WorkerInfo& w : *workers) *r.add_workers() = w;
    std::cout << ToJson(r);
    return kOk;
  }
  std::cout << absl::StrFormat("%-16s %-14s %-16s %-6s %s\n", "WORKER", "NODE", "ADDRESS", "STATE",
                               "SLOTS");
  for (const WorkerInfo& w : *workers) {
    std::string kind = w.slots_size() > 0 ? Slot::Kind_Name(w.slots(0).kind()) : "-";
    std::cout << absl::StrFormat("%-16s %-14s %-16s %-6s %d %s (%d busy)\n", w.worker_id(),
                                 w.node_name(), w.address(), WorkerInfo::State_Name(w.state()),
                                 w.slots_size(), kind, w.busy_slots());
  }
  return kOk;
}

namespace {

// "3 of at most 8" or "3 (no bound)".
std::string OfBound(int64_t used, int64_t max) {
  return max > 0 ? absl::StrCat(used, " of at most ", max) : absl::StrCat(used, " (no bound)");
}

// The user's quota usage (docs/security.md, "Resource bounds").
void PrintUsage(const UserUsage& u) {
  // An older coordinator sends no source: its bounds are the flags.
  const std::string pending =
      u.pending_jobs_source().empty() ? "--max_pending_jobs_per_user" : u.pending_jobs_source();
  const std::string running =
      u.running_ranks_source().empty() ? "--max_running_ranks_per_user" : u.running_ranks_source();
  std::cout << "pending    " << OfBound(u.pending_jobs(), u.max_pending_jobs()) << " jobs ("
            << pending << ")\n"
            << "running    " << OfBound(u.running_ranks(), u.max_running_ranks()) << " ranks ("
            << running << ")\n"
            << "specs      " << OfBound(u.spec_bytes(), u.max_spec_bytes())
            << " bytes (--max_spec_bytes_per_user; one job at most "
            << (u.max_spec_bytes_per_job() > 0 ? absl::StrCat(u.max_spec_bytes_per_job())
                                               : std::string("unbounded"))
            << ")\n";
}

}  // namespace

int CmdWhoAmI(Session& session, const Args&) {
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  auto me = (*client)->WhoAmI();
  if (!me.ok()) return session.Fail(me.status());
  if (session.options().json) {
    std::cout << ToJson(*me);
    return kOk;
  }
  if (!me->user().empty()) {
    std::cout << "user       " << me->user() << (me->admin() ? " (admin)" : "") << "\n";
  }
  std::cout << "credential " << me->credential() << "\n";
  if (!me->job_id().empty()) {
    std::cout << "attempt    " << me->job_id() << " attempt " << me->attempt() << "\n";
  }
  if (me->has_usage()) PrintUsage(me->usage());
  return kOk;
}

}  // namespace shardline::cli
