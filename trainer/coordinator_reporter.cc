#include "trainer/coordinator_reporter.h"

#include <memory>

#include "common/logging.h"
#include "coordinator/client.h"
#include "coordinator/client_tls.h"
#include "proto/coordinator.pb.h"

namespace shardline::trainer {

absl::StatusOr<std::function<void(const checkpoint::SaveEvent&)>> MakeCoordinatorReporter(
    const CoordinatorReporterOptions& options) {
  // TLS as the worker daemon says (SHARDLINE_TLS_CA, SHARDLINE_INSECURE).
  auto client_options = coordinator::ClientOptionsFromEnv(options.address, options.token);
  if (!client_options.ok()) return client_options.status();
  auto client = coordinator::CoordinatorClient::Create(*client_options);
  if (!client.ok()) return client.status();
  std::shared_ptr<coordinator::CoordinatorClient> shared(std::move(*client));
  return std::function<void(const checkpoint::SaveEvent&)>(
      [shared, options](const checkpoint::SaveEvent& e) {
        CheckpointReport r;
        r.set_job_id(options.job_id);
        r.set_attempt(options.attempt);
        r.set_rank(options.rank);
        r.set_step(e.step);
        r.set_path(e.step_dir);
        for (const std::string& f : e.files) r.add_files(f);
        r.set_manifest_committed(e.manifest_committed);
        r.set_expected_files(e.expected_files);
        absl::Status s = shared->ReportCheckpoint(r);
        if (!s.ok()) {
          SL_LOG(WARNING) << "reporting checkpoint step " << e.step << " to the coordinator: " << s;
        }
      });
}

}  // namespace shardline::trainer
