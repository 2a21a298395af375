#include "trainer/coordinator_reporter.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "client/client.h"
#include "client/client_tls.h"
#include "common/logging.h"
#include "common/retry.h"
#include "proto/coordinator.pb.h"
#include "trainer/logged_steps.h"
#include "trainer/report_queue.h"

namespace shardline::trainer {
namespace {

CheckpointReport ReportOf(const CoordinatorReporterOptions& o, const checkpoint::SaveEvent& e) {
  CheckpointReport r;
  r.set_job_id(o.job_id);
  r.set_attempt(o.attempt);
  r.set_rank(o.rank);
  r.set_step(e.step);
  r.set_path(e.step_dir);
  for (const std::string& f : e.files) r.add_files(f);
  r.set_manifest_committed(e.manifest_committed);
  r.set_expected_files(e.expected_files);
  r.set_size_bytes(e.size_bytes);
  r.set_preempted(e.manifest_committed && o.saved_for_preemption && o.saved_for_preemption(e.step));
  return r;
}

}  // namespace

absl::StatusOr<CoordinatorReporter> MakeCoordinatorReporter(
    const CoordinatorReporterOptions& options) {
  // TLS as the worker daemon says (SHARDLINE_TLS_CA, SHARDLINE_INSECURE).
  auto client = client::ClientFromEnv(options.address, options.token);
  if (!client.ok()) return client.status();
  std::shared_ptr<client::CoordinatorClient> shared(std::move(*client));
  CoordinatorReporter out;
  // Off the save's thread: a hung coordinator must not stall the save for the client's deadline.
  auto queue = std::make_shared<ReportQueue>();
  out.on_saved = [shared, queue, options](const checkpoint::SaveEvent& e) {
    CheckpointReport r = ReportOf(options, e);
    queue->Push(absl::StrCat("checkpoint step ", e.step, " (rank ", options.rank, "'s files)"),
                [shared, r = std::move(r)] { return shared->ReportCheckpoint(r); });
  };
  auto logged = std::make_shared<LoggedSteps>(options.metrics_file);
  out.report_commit = [shared, options, logged](const checkpoint::SaveEvent& e) {
    if (!options.metrics_file.empty()) {
      const bool logged_step = options.step_is_logged && options.step_is_logged(e.step);
      for (ProgressReport& p : logged->UpTo(e.step, logged_step)) {
        p.set_job_id(options.job_id);
        p.set_attempt(options.attempt);
        p.set_rank(options.rank);
        if (absl::Status s = shared->ReportProgress(p); !s.ok()) return s;
      }
    }
    absl::Status s = shared->ReportCheckpoint(ReportOf(options, e));
    if (s.ok()) logged->Acknowledge(e.step);
    return s;
  };
  out.report_fallback = [shared, options](int64_t missing_step, int64_t step,
                                          const std::string& root) {
    CheckpointReport r;
    r.set_job_id(options.job_id);
    r.set_attempt(options.attempt);
    r.set_rank(options.rank);
    r.set_step(step);
    r.set_path(root);
    r.set_fallback_from_step(missing_step);
    BackoffPolicy policy;
    policy.total = absl::Seconds(30);
    return RetryWithBackoff(policy, [&] { return shared->ReportCheckpoint(r); });
  };
  return out;
}

}  // namespace shardline::trainer
