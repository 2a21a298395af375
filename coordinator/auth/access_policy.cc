#include "coordinator/auth/access_policy.h"

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {
namespace {

absl::string_view OwnerName(absl::string_view owner) {
  return owner.empty() ? "nobody recorded" : owner;
}

}  // namespace

bool MayAct(const User& user, absl::string_view owner) { return user.admin || owner == user.name; }

absl::Status CheckJobAccess(const User& user, absl::string_view job_id,
                            absl::FunctionRef<absl::StatusOr<std::string>()> owner_of,
                            absl::string_view action) {
  if (user.admin) return absl::OkStatus();
  absl::StatusOr<std::string> owner = owner_of();
  if (!owner.ok()) return owner.status();
  if (MayAct(user, *owner)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("job ", job_id, " is owned by ",
                                                  OwnerName(*owner),
                                                  "; only its owner or an admin may ", action));
}

absl::Status CheckResumeFrom(const User& user, absl::string_view path,
                             const CheckpointSource& source) {
  if (user.admin) return absl::OkStatus();
  if (source.job_id.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint.resume_from: ", path,
                     " is not a committed checkpoint of any job the coordinator knows "
                     "(`shardctl checkpoints JOB` lists them); only an admin may continue a "
                     "checkpoint it has no record of"));
  }
  if (MayAct(user, source.owner)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "checkpoint.resume_from: ", path, " is a checkpoint of job ", source.job_id, ", owned by ",
      OwnerName(source.owner), "; only its owner or an admin may continue it"));
}

absl::Status CheckInitFrom(const User& user, absl::string_view field, absl::string_view path,
                           const CheckpointSource& source) {
  if (source.job_id.empty() || MayAct(user, source.owner)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      field, ": ", path, " is in the checkpoint directory of job ", source.job_id, ", owned by ",
      OwnerName(source.owner), "; only its owner or an admin may start from it"));
}

}  // namespace shardline::coordinator
