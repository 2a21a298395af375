// CoordinatorService's authorization: which credential a call carries (user, daemon, worker,
// attempt) and what it may do (docs/security.md has the table). The RPC methods are in service.cc.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/constant_time.h"
#include "common/grpc_status.h"
#include "coordinator/auth/access_policy.h"
#include "coordinator/service.h"

namespace shardline::coordinator {

namespace {

constexpr char kWorkerCredentialHeader[] = "x-shardline-worker-credential";

// The "authorization" metadata of a call: whether it was sent and its bearer token (empty for a
// value without the "Bearer " prefix).
struct Bearer {
  bool present = false;
  std::string token;
};

Bearer BearerOf(const grpc::ServerContextBase* ctx) {
  Bearer b;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return b;
  b.present = true;
  absl::string_view value(it->second.data(), it->second.size());
  if (absl::ConsumePrefix(&value, "Bearer ")) b.token = std::string(value);
  return b;
}

grpc::Status MissingBearer() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing \"authorization: Bearer <token>\" metadata");
}

// What an attempt credential may do, for a call it may not make.
grpc::Status AttemptMayNot(const AttemptIdentity& a, const char* method, const char* needs) {
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(
          "an attempt credential (job ", a.job_id, " attempt ", a.attempt,
          ") may only call ReportProgress, ReportCheckpoint and StepVote for that attempt and "
          "RendezvousSet/RendezvousGet in its namespace ",
          a.rendezvous_namespace, "; ", method, " needs ", needs));
}

}  // namespace

grpc::Status CoordinatorService::AuthorizeUser(const grpc::ServerContextBase* ctx,
                                               const char* method, User* user) const {
  const Bearer b = BearerOf(ctx);
  if (b.present) {
    if (std::optional<User> u = users_->Find(b.token)) {
      *user = *u;
      return grpc::Status::OK;
    }
    if (std::optional<AttemptIdentity> a = core_->IdentifyAttempt(b.token)) {
      return AttemptMayNot(*a, method, "a user token");
    }
  }
  if (users_->empty()) {  // user authentication is off
    *user = User{"anonymous", true};
    return grpc::Status::OK;
  }
  if (!b.present) return MissingBearer();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong user token");
}

grpc::Status CoordinatorService::AuthorizeDaemon(const grpc::ServerContextBase* ctx,
                                                 const char* method) const {
  if (options_.require_worker_client_cert) {
    auto auth = ctx->auth_context();
    if (auth == nullptr || !auth->IsPeerAuthenticated()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "worker calls need a client certificate signed by the coordinator's "
                          "client CA");
    }
  }
  const Bearer b = BearerOf(ctx);
  if (b.present && !worker_token_.empty() && ConstantTimeEquals(b.token, worker_token_)) {
    return grpc::Status::OK;
  }
  if (b.present) {
    if (std::optional<AttemptIdentity> a = core_->IdentifyAttempt(b.token)) {
      return AttemptMayNot(*a, method, "the worker join token");
    }
  }
  if (worker_token_.empty()) return grpc::Status::OK;  // worker authentication is off
  if (!b.present) return MissingBearer();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong worker join token");
}

std::string CoordinatorService::PresentedWorkerCredential(const grpc::ServerContextBase* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kWorkerCredentialHeader);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

grpc::Status CoordinatorService::CheckWorkerCredential(const grpc::ServerContextBase* ctx,
                                                       const std::string& worker_id) const {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kWorkerCredentialHeader);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("missing \"", kWorkerCredentialHeader,
                                     "\" metadata: send the worker_credential RegisterWorker "
                                     "returned"));
  }
  const absl::Status s = core_->CheckWorkerCredential(
      worker_id, absl::string_view(it->second.data(), it->second.size()));
  // An unknown id is the core's business (re-register / NOT_FOUND), not an identity question.
  if (absl::IsNotFound(s)) return grpc::Status::OK;
  return ToGrpcStatus(s);
}

grpc::Status CoordinatorService::AuthorizeAttempt(const grpc::ServerContextBase* ctx,
                                                  const char* method,
                                                  AttemptIdentity* attempt) const {
  const Bearer b = BearerOf(ctx);
  if (!b.present) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("missing \"authorization: Bearer <attempt credential>\" metadata: ", method,
                     " needs the credential of a running job attempt (its trainers' "
                     "SHARDLINE_RDZV_SECRET)"));
  }
  std::optional<AttemptIdentity> a = core_->IdentifyAttempt(b.token);
  if (!a) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat(method,
                     " needs the credential of a running job attempt (its trainers' "
                     "SHARDLINE_RDZV_SECRET); the token sent is none (user and worker tokens are "
                     "not, and an attempt's stops working when the attempt ends)"));
  }
  *attempt = *std::move(a);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CheckReportFor(const AttemptIdentity& caller,
                                                const std::string& job_id, int32_t attempt) {
  if (caller.job_id == job_id && caller.attempt == attempt) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat("the attempt credential of job ", caller.job_id, " attempt ", caller.attempt,
                   " may not report for job ", job_id, " attempt ", attempt));
}

grpc::Status CoordinatorService::CheckNamespaceFor(const AttemptIdentity& caller,
                                                   const std::string& ns) {
  if (caller.rendezvous_namespace == ns) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat("the attempt credential of job ", caller.job_id, " attempt ",
                                   caller.attempt, " may only use rendezvous namespace ",
                                   caller.rendezvous_namespace, ", not ", ns));
}

grpc::Status CoordinatorService::CheckCheckpointSources(const User& user,
                                                        const JobSpec& spec) const {
  const std::string& from = spec.checkpoint().resume_from();
  if (!from.empty()) {
    const CoordinatorCore::CheckpointOwner who = core_->OwnerOfCheckpointPath(from, true);
    if (absl::Status s = CheckResumeFrom(user, from, {who.job_id, who.owner}); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  // The weights a job starts from, one rule for both fields (access_policy.h CheckInitFrom).
  const std::pair<const char*, const std::string*> inits[] = {
      {"checkpoint.init_from_safetensors", &spec.checkpoint().init_from_safetensors()},
      {"checkpoint.init_from_dcp", &spec.checkpoint().init_from_dcp()}};
  for (const auto& [field, path] : inits) {
    if (path->empty()) continue;
    const CoordinatorCore::CheckpointOwner who = core_->OwnerOfCheckpointPath(*path, false);
    if (absl::Status s = CheckInitFrom(user, field, *path, {who.job_id, who.owner}); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CheckOwner(const User& user, const std::string& job_id,
                                            const char* action) const {
  return ToGrpcStatus(CheckJobAccess(
      user, job_id,
      [&]() -> absl::StatusOr<std::string> {
        absl::StatusOr<JobStatus> st = core_->GetJob(job_id);
        if (!st.ok()) return st.status();
        return st->owner();
      },
      action));
}

grpc::Status CoordinatorService::CheckNode(const grpc::ServerContextBase* ctx,
                                           const std::string& node_name) const {
  if (!options_.require_worker_client_cert) return grpc::Status::OK;
  auto auth = ctx->auth_context();
  if (auth != nullptr) {
    for (const grpc::string_ref& id : auth->GetPeerIdentity()) {
      if (absl::string_view(id.data(), id.size()) == node_name) return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "the client certificate does not name node " + node_name);
}

grpc::Status CoordinatorService::CheckWorker(const grpc::ServerContextBase* ctx,
                                             const std::string& worker_id) const {
  if (!options_.require_worker_client_cert) return grpc::Status::OK;
  auto info = core_->GetWorker(worker_id);
  // An unknown id is the core's business (re-register / NOT_FOUND), not an identity question.
  if (!info.ok()) return grpc::Status::OK;
  return CheckNode(ctx, info->node_name());
}

grpc::Status CoordinatorService::WhoAmI(grpc::ServerContext* ctx, const WhoAmIRequest*,
                                        WhoAmIResponse* resp) {
  const Bearer b = BearerOf(ctx);
  if (b.present) {
    if (std::optional<User> u = users_->Find(b.token)) {
      resp->set_user(u->name);
      resp->set_admin(u->admin);
      resp->set_credential("user token");
      *resp->mutable_usage() = core_->UsageOf(u->name);
      return grpc::Status::OK;
    }
    if (!worker_token_.empty() && ConstantTimeEquals(b.token, worker_token_)) {
      resp->set_credential("worker join token");
      return grpc::Status::OK;
    }
    if (std::optional<AttemptIdentity> a = core_->IdentifyAttempt(b.token)) {
      resp->set_credential("attempt credential");
      resp->set_job_id(a->job_id);
      resp->set_attempt(a->attempt);
      return grpc::Status::OK;
    }
  }
  if (users_->empty()) {
    resp->set_user("anonymous");
    resp->set_admin(true);
    resp->set_credential("none");
    *resp->mutable_usage() = core_->UsageOf("anonymous");
    return grpc::Status::OK;
  }
  if (!b.present) return MissingBearer();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "wrong token: no user's, not the worker join token, and no running job "
                      "attempt's credential");
}

}  // namespace shardline::coordinator
