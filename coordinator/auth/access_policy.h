// The coordinator's access rule, in one place: a user may act on a job (cancel it, read its
// logs, metrics and checkpoints, continue or start from its checkpoints) when the user owns it or
// is an admin. Every front end asks here: the gRPC service (coordinator/service_auth.cc) and the
// dashboard's JSON API (coordinator/dashboard/json_api.cc). The messages name the job, its owner
// and the action refused, so a refused user knows whom to ask.
//
// Stateless; the callers look the owner up (the core's job table or checkpoint registry), and
// the policy decides.
#ifndef SHARDLINE_COORDINATOR_AUTH_ACCESS_POLICY_H_
#define SHARDLINE_COORDINATOR_AUTH_ACCESS_POLICY_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/auth/user_table.h"

namespace shardline::coordinator {

// True when `user` may act on what `owner` owns.
bool MayAct(const User& user, absl::string_view owner);

// OK when `user` may `action` (e.g. "cancel it") job `job_id`. `owner_of` is called only when the
// user is no admin (an admin needs no lookup); its error (NOT_FOUND for an unknown job) is
// returned as is. PERMISSION_DENIED names the job and its owner.
absl::Status CheckJobAccess(const User& user, absl::string_view job_id,
                            absl::FunctionRef<absl::StatusOr<std::string>()> owner_of,
                            absl::string_view action);

// Who a checkpoint path belongs to, as the core's registry answers: the job (empty when no job
// is known) and its owner.
struct CheckpointSource {
  std::string job_id;
  std::string owner;
};

// checkpoint.resume_from: `path` must be a committed checkpoint of a job the registry knows and
// `user` may act on. Only an admin may continue a checkpoint the coordinator has no record of.
absl::Status CheckResumeFrom(const User& user, absl::string_view path,
                             const CheckpointSource& source);

// checkpoint.init_from_safetensors and init_from_dcp (`field`): a path outside every job's
// checkpoint directory is anyone's to start from; one inside a job's directory only its owner's
// (or an admin's).
absl::Status CheckInitFrom(const User& user, absl::string_view field, absl::string_view path,
                           const CheckpointSource& source);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_AUTH_ACCESS_POLICY_H_
