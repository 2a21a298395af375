// DashboardApi: the JSON documents the dashboard's pages poll (GET /api/...), read in-process
// from CoordinatorCore through the calls the gRPC service makes, with the API's rules:
// every user sees the job list, a job's status and the workers; a job's training series, logs
// and checkpoints only its owner or an admin (PERMISSION_DENIED naming the owner, as the API).
//
// Documents are protobuf messages printed as JSON (proto field names, zeros included), so every
// string a user controls (job names, log lines, event messages) reaches the page JSON-escaped;
// '<' and '>' are escaped too (\u003c), so no markup survives even if a document were inlined;
// the pages then put text into the DOM as text only (static/dashboard.js).
//
// Thread safety: every method may be called from any thread (the core's own).
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_JSON_API_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_JSON_API_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/auth/user_table.h"
#include "coordinator/core/coordinator_core.h"

namespace shardline::coordinator::dashboard {

class DashboardApi {
 public:
  // Log lines one /logs document holds at most per rank (a page's first look; then only newer).
  static constexpr int kMaxTailLines = 1000;

  explicit DashboardApi(CoordinatorCore* core) : core_(core) {}

  // {"user": name, "admin": bool}.
  std::string WhoAmI(const User& user) const;
  // ListJobsResponse: one page of the jobs, newest first, each without its spec (except its name
  // and size), events and placement: `page_size` jobs (0: 100, or --max_list_page_size if lower)
  // after the page `page_token` names, and next_page_token when more follow. Errors:
  // INVALID_ARGUMENT for a page_size outside [0, --max_list_page_size] or a token this
  // coordinator did not issue (JobTable::Page).
  absl::StatusOr<std::string> Jobs(const User& user, int64_t page_size = 0,
                                   const std::string& page_token = "") const;
  // {"status": JobStatus, "may_read": whether `user` may read the series, logs and checkpoints}.
  // Errors: NOT_FOUND.
  absl::StatusOr<std::string> Job(const User& user, const std::string& job_id) const;
  // GetJobMetricsResponse: the stored (downsampled) series, never the raw history.
  // Errors: NOT_FOUND, PERMISSION_DENIED.
  absl::StatusOr<std::string> Metrics(const User& user, const std::string& job_id) const;
  // GetLogsResponse of every rank: lines after `after_seq`, at most `tail_lines` per rank
  // (1..kMaxTailLines). Errors: NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT.
  absl::StatusOr<std::string> Logs(const User& user, const std::string& job_id, int64_t after_seq,
                                   int tail_lines) const;
  // ListCheckpointsResponse. Errors: NOT_FOUND, PERMISSION_DENIED.
  absl::StatusOr<std::string> Checkpoints(const User& user, const std::string& job_id) const;
  // GetCheckpointResponse with the manifest (manifest_fetch.h). Errors: the core's GetCheckpoint,
  // PERMISSION_DENIED.
  absl::StatusOr<std::string> Checkpoint(const User& user, const std::string& job_id,
                                         int64_t step) const;
  // ListWorkersResponse.
  std::string Workers(const User& user) const;

  // {"error": message}.
  static std::string ErrorJson(const absl::Status& status);

 private:
  // OK when `user` is an admin or owns the job. Errors: NOT_FOUND, PERMISSION_DENIED.
  absl::Status CheckOwner(const User& user, const std::string& job_id, const char* action) const;

  CoordinatorCore* core_;
};

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_JSON_API_H_
