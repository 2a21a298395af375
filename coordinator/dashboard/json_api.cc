#include "coordinator/dashboard/json_api.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "coordinator/auth/access_policy.h"

namespace shardline::coordinator::dashboard {
namespace {

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

// `s` as a JSON string (quoted; '<' and '>' escaped too, as protobuf's printer does).
std::string JsonString(absl::string_view s) {
  google::protobuf::Value v;
  v.set_string_value(std::string(s));
  return ToJson(v);
}

}  // namespace

std::string DashboardApi::WhoAmI(const User& user) const {
  return absl::StrCat("{\"user\":", JsonString(user.name),
                      ",\"admin\":", user.admin ? "true" : "false", "}");
}

absl::StatusOr<std::string> DashboardApi::Jobs(const User&, int64_t page_size,
                                               const std::string& page_token) const {
  // One page, so the document (and the copy made for it) stays bounded however many jobs exist.
  ListJobsRequest req;
  req.set_page_size(static_cast<int32_t>(std::clamp<int64_t>(page_size, -1, INT32_MAX)));
  req.set_page_token(page_token);
  absl::StatusOr<ListJobsResponse> out = core_->ListJobsPage(req, /*newest_first=*/true);
  if (!out.ok()) return out.status();
  for (JobStatus& j : *out->mutable_jobs()) {
    // The list needs the name and size only (the job page fetches the whole spec); the size is
    // kept so the list's JSON never says world_size 0.
    const std::string name = j.spec().name();
    const int32_t world_size = j.spec().world_size();
    j.clear_spec();
    j.mutable_spec()->set_name(name);
    j.mutable_spec()->set_world_size(world_size);
    j.clear_events();
    j.clear_placement();
    j.clear_sample();
  }
  return ToJson(*out);
}

absl::StatusOr<std::string> DashboardApi::Job(const User& user, const std::string& job_id) const {
  absl::StatusOr<JobStatus> st = core_->GetJob(job_id);
  if (!st.ok()) return st.status();
  const bool may_read = MayAct(user, st->owner());
  return absl::StrCat("{\"status\":", ToJson(*st), ",\"may_read\":", may_read ? "true" : "false",
                      "}");
}

absl::StatusOr<std::string> DashboardApi::Metrics(const User& user,
                                                  const std::string& job_id) const {
  if (absl::Status s = CheckOwner(user, job_id, "read its metrics"); !s.ok()) return s;
  GetJobMetricsRequest req;
  req.set_job_id(job_id);
  absl::StatusOr<GetJobMetricsResponse> r = core_->GetJobMetrics(req);
  if (!r.ok()) return r.status();
  return ToJson(*r);
}

absl::StatusOr<std::string> DashboardApi::Logs(const User& user, const std::string& job_id,
                                               int64_t after_seq, int tail_lines) const {
  if (tail_lines < 1 || tail_lines > kMaxTailLines) {
    return absl::InvalidArgumentError(
        absl::StrCat("tail must be between 1 and ", kMaxTailLines, ", got ", tail_lines));
  }
  if (absl::Status s = CheckOwner(user, job_id, "read its logs"); !s.ok()) return s;
  GetLogsRequest req;
  req.set_job_id(job_id);
  req.set_all_ranks(true);
  req.set_after_seq(after_seq);
  req.set_tail_lines(tail_lines);
  absl::StatusOr<GetLogsResponse> r = core_->GetLogs(req);
  if (!r.ok()) return r.status();
  return ToJson(*r);
}

absl::StatusOr<std::string> DashboardApi::Checkpoints(const User& user,
                                                      const std::string& job_id) const {
  if (absl::Status s = CheckOwner(user, job_id, "list its checkpoints"); !s.ok()) return s;
  auto list = core_->ListCheckpoints(job_id);
  if (!list.ok()) return list.status();
  ListCheckpointsResponse out;
  for (CheckpointInfo& c : *list) *out.add_checkpoints() = std::move(c);
  return ToJson(out);
}

absl::StatusOr<std::string> DashboardApi::Checkpoint(const User& user, const std::string& job_id,
                                                     int64_t step) const {
  if (absl::Status s = CheckOwner(user, job_id, "read its checkpoints"); !s.ok()) return s;
  auto r = core_->GetCheckpoint(job_id, step);
  if (!r.ok()) return r.status();
  return ToJson(*r);
}

std::string DashboardApi::Workers(const User&) const {
  ListWorkersResponse out;
  for (WorkerInfo& w : core_->ListWorkers()) *out.add_workers() = std::move(w);
  return ToJson(out);
}

std::string DashboardApi::ErrorJson(const absl::Status& status) {
  return absl::StrCat("{\"error\":", JsonString(status.message()), "}");
}

absl::Status DashboardApi::CheckOwner(const User& user, const std::string& job_id,
                                      const char* action) const {
  return CheckJobAccess(
      user, job_id,
      [&]() -> absl::StatusOr<std::string> {
        absl::StatusOr<JobStatus> st = core_->GetJob(job_id);
        if (!st.ok()) return st.status();
        return st->owner();
      },
      action);
}

}  // namespace shardline::coordinator::dashboard
