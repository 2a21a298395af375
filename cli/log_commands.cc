// shardctl logs, metrics: what a job's ranks printed and the training series they reported.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/json_output.h"
#include "cli/progress_view.h"

namespace shardline::cli {

// Rank logs come from the coordinator (GetLogs): the worker daemons ship every rank's lines to
// it, so this works from any machine that reaches the coordinator, while the job runs (--follow)
// and after it ended.
int CmdLogs(Session& session, const Args& args) {
  if (args.size() < 3) {
    return session.UsageError(
        "usage: shardctl logs JOB [--rank=N|--all] [--follow] [--tail=K] [--since=10m]");
  }
  const ShardctlOptions& opts = session.options();
  const int rank = opts.rank;
  if (rank >= 0 && opts.all) return session.UsageError("logs: --rank and --all exclude each other");
  if (opts.tail < 0) return session.UsageError("logs: --tail must be >= 0");
  GetLogsRequest req;
  req.set_job_id(args[2]);
  req.set_rank(rank >= 0 ? rank : 0);
  req.set_all_ranks(rank < 0);
  req.set_tail_lines(opts.tail);
  if (const std::string& since = opts.since; !since.empty()) {
    absl::Duration ago;
    absl::Time at;
    std::string err;
    if (absl::ParseDuration(since, &ago)) {
      at = absl::Now() - ago;
    } else if (!absl::ParseTime(absl::RFC3339_full, since, &at, &err)) {
      return session.UsageError(absl::StrCat(
          "logs: --since=", since, ": not a duration (10m) or an RFC 3339 time (", err, ")"));
    }
    req.set_since_unix_ms(absl::ToUnixMillis(at));
  }
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  bool seen_finished = false;
  while (true) {
    auto resp = (*client)->GetLogs(req);
    if (!resp.ok()) return session.Fail(resp.status());
    for (const LogLine& l : resp->lines()) {
      std::cout << "attempt-" << l.attempt() << "/rank-" << l.rank() << "| " << l.text() << "\n";
    }
    std::cout << std::flush;
    req.set_after_seq(resp->next_seq());
    req.set_tail_lines(0);  // the tail applies to the first answer only
    if (resp->truncated()) continue;
    // After the job ended one more look: lines shipped while the last answer was built.
    if (!opts.follow || seen_finished) return kOk;
    seen_finished = resp->job_finished();
    absl::SleepFor(absl::Milliseconds(seen_finished ? 200 : 500));
  }
}

// The job's training series (GetJobMetrics): one line per stored point.
int CmdMetrics(Session& session, const Args& args) {
  if (args.size() < 3) return session.UsageError("usage: shardctl metrics JOB [--json]");
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  auto m = (*client)->GetJobMetrics(args[2]);
  if (!m.ok()) return session.Fail(m.status());
  if (session.options().json) {
    std::cout << ToJson(*m);
    return kOk;
  }
  std::cout << absl::StrFormat("%s: %s, %d logged steps in %d points (%d step(s) a point)\n",
                               args[2], JobStateName(m->state()), m->reported_steps(),
                               m->points_size(), m->stride());
  std::cout << absl::StrFormat("%-9s %-9s %-9s %-10s %-9s %-11s %-8s %-9s %s\n", "STEP", "LOSS",
                               "VAL_LOSS", "LR", "GRAD_NORM", "TOKENS/S", "MFU", "STEP_S",
                               "PEAK_MEM");
  for (const MetricsPoint& p : m->points()) {
    std::cout << absl::StrFormat(
        "%-9d %-9.4f %-9s %-10.3g %-9.3f %-11.0f %-8s %-9.3f %.0fMiB\n", p.step(), p.loss(),
        p.val_count() > 0 ? absl::StrFormat("%.4f", p.val_loss()) : "-", p.lr(), p.grad_norm(),
        p.tokens_per_s(), absl::StrFormat("%.2f%%", 100 * p.mfu()), p.step_time_s(),
        p.peak_memory_bytes() / 1048576.0);
  }
  if (m->points_size() == 0) std::cout << "(no progress reported yet)\n";
  return kOk;
}

}  // namespace shardline::cli
