#include "launch/rank_env.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "launch/env_names.h"

namespace shardline::launch {
namespace {

using GetEnv = std::function<const char*(const char*)>;

absl::Status Refuse(const char* name, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("environment ", name, "=\"", value, "\" ", why));
}

// The value of `name`; nullopt when unset or "".
std::optional<std::string> Get(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string GetString(const GetEnv& getenv, const char* name) {
  return Get(getenv, name).value_or("");
}

// An integer variable (int or int64_t); nullopt when unset.
template <typename Int>
absl::StatusOr<std::optional<Int>> GetInt(const GetEnv& getenv, const char* name) {
  const std::optional<std::string> v = Get(getenv, name);
  if (!v.has_value()) return std::optional<Int>();
  Int out = 0;
  if (!absl::SimpleAtoi(*v, &out)) return Refuse(name, *v, "is not an integer");
  return std::optional<Int>(out);
}

// An integer variable that may not be negative, into *out (left as it is when unset).
template <typename Int>
absl::Status GetNonNegative(const GetEnv& getenv, const char* name, Int* out) {
  absl::StatusOr<std::optional<Int>> v = GetInt<Int>(getenv, name);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::OkStatus();
  if (**v < 0) {
    return absl::InvalidArgumentError(absl::StrCat("environment ", name, "=", **v, " is negative"));
  }
  *out = **v;
  return absl::OkStatus();
}

// A positive, finite number; nullopt when unset. `unit` names it in the error.
absl::StatusOr<std::optional<double>> GetPositive(const GetEnv& getenv, const char* name,
                                                  absl::string_view unit) {
  const std::optional<std::string> v = Get(getenv, name);
  if (!v.has_value()) return std::optional<double>();
  double out = 0;
  if (!absl::SimpleAtod(*v, &out) || !(out > 0) || !std::isfinite(out)) {
    return Refuse(name, *v, absl::StrCat("is not a positive number of ", unit));
  }
  return std::optional<double>(out);
}

// A variable that is one of two spellings (or unset: false).
absl::StatusOr<bool> GetFlag(const GetEnv& getenv, const char* name, const char* yes,
                             const char* no) {
  const std::optional<std::string> v = Get(getenv, name);
  if (!v.has_value() || *v == no) return false;
  if (*v == yes) return true;
  return Refuse(name, *v, absl::StrCat("is not ", yes, " or ", no));
}

// RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and how they fit together.
absl::Status ReadPlace(const GetEnv& getenv, RankEnv* e) {
  absl::StatusOr<std::optional<int>> rank = GetInt<int>(getenv, kRankEnv);
  if (!rank.ok()) return rank.status();
  absl::StatusOr<std::optional<int>> world = GetInt<int>(getenv, kWorldSizeEnv);
  if (!world.ok()) return world.status();
  if (rank->has_value() != world->has_value()) {
    return absl::InvalidArgumentError(
        "environment: RANK and WORLD_SIZE must be set together (or neither, for one process)");
  }
  e->rank = rank->value_or(0);
  e->world_size = world->value_or(1);
  if (e->world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment WORLD_SIZE=", e->world_size, " must be >= 1"));
  }
  if (e->rank < 0 || e->rank >= e->world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment RANK=", e->rank, " is not in [0, WORLD_SIZE=", e->world_size, ")"));
  }
  const bool has_local_rank = Get(getenv, kLocalRankEnv).has_value();
  e->local_rank = e->rank;
  if (absl::Status s = GetNonNegative(getenv, kLocalRankEnv, &e->local_rank); !s.ok()) return s;
  absl::StatusOr<std::optional<int>> local_world = GetInt<int>(getenv, kLocalWorldSizeEnv);
  if (!local_world.ok()) return local_world.status();
  e->local_world_size = local_world->value_or(0);
  if (has_local_rank && local_world->has_value() && e->local_rank >= e->local_world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment LOCAL_RANK=", e->local_rank,
                     " is not in [0, LOCAL_WORLD_SIZE=", e->local_world_size, ")"));
  }
  return absl::OkStatus();
}

// MASTER_ADDR and MASTER_PORT.
absl::Status ReadMaster(const GetEnv& getenv, RankEnv* e) {
  e->master_addr = GetString(getenv, kMasterAddrEnv);
  absl::StatusOr<std::optional<int>> port = GetInt<int>(getenv, kMasterPortEnv);
  if (!port.ok()) return port.status();
  e->master_port = port->value_or(0);
  if (port->has_value() && (e->master_port < 1 || e->master_port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment MASTER_PORT=", e->master_port, " is not a TCP port"));
  }
  return absl::OkStatus();
}

// Roots from `name` ("/a,/b"): absolute folders only.
absl::Status ReadRoots(const GetEnv& getenv, const char* name, std::vector<std::string>* roots) {
  for (absl::string_view root :
       absl::StrSplit(GetString(getenv, name), ',', absl::SkipWhitespace())) {
    if (!absl::StartsWith(root, "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment ", name, ": root \"", root, "\" is not an absolute path"));
    }
    roots->emplace_back(root);
  }
  return absl::OkStatus();
}

// The worker daemon's variables.
absl::Status ReadDaemon(const GetEnv& getenv, RankEnv* e) {
  e->coordinator = GetString(getenv, kCoordinatorEnv);
  e->job_id = GetString(getenv, kJobIdEnv);
  if (absl::Status s = GetNonNegative(getenv, kAttemptEnv, &e->attempt); !s.ok()) return s;
  e->rdzv_namespace = GetString(getenv, kRdzvNamespaceEnv);
  e->rdzv_secret = GetString(getenv, kRdzvSecretEnv);
  int64_t resume_step = -1;
  if (absl::Status s = GetNonNegative(getenv, kResumeStepEnv, &resume_step); !s.ok()) return s;
  if (resume_step >= 0) e->resume_step = resume_step;
  e->resume_from_job = GetString(getenv, kResumeFromJobEnv);
  if (absl::Status s = GetNonNegative(getenv, kRankGenerationEnv, &e->rank_generation); !s.ok()) {
    return s;
  }
  e->advertise_address = GetString(getenv, kAdvertiseAddressEnv);
  e->node_name = GetString(getenv, kNodeNameEnv);
  e->device.cuda_visible_devices = Get(getenv, kCudaVisibleDevicesEnv);
  e->device.cuda_device_order = Get(getenv, kCudaDeviceOrderEnv);
  e->device.nccl_socket_ifname = Get(getenv, kNcclSocketIfnameEnv);
  if (absl::Status s = ReadRoots(getenv, kOpenRootsEnv, &e->open_roots); !s.ok()) return s;
  return ReadRoots(getenv, kWriteRootsEnv, &e->write_roots);
}

// The standalone store's and the operator's settings.
absl::Status ReadLauncherSettings(const GetEnv& getenv, RankEnv* e) {
  e->store_secret = GetString(getenv, kStoreSecretEnv);
  absl::StatusOr<bool> insecure = GetFlag(getenv, kStoreInsecureEnv, "1", "0");
  if (!insecure.ok()) return insecure.status();
  e->store_insecure = *insecure;
  absl::StatusOr<bool> agent = GetFlag(getenv, kTorchElasticAgentStoreEnv, "True", "False");
  if (!agent.ok()) return agent.status();
  e->torchelastic_agent_store = *agent;
  absl::StatusOr<std::optional<double>> peak = GetPositive(getenv, kPeakFlopsEnv, "FLOP/s");
  if (!peak.ok()) return peak.status();
  e->peak_flops = *peak;
  absl::StatusOr<std::optional<double>> cap = GetPositive(getenv, kCpuMemoryCapMibEnv, "MiB");
  if (!cap.ok()) return cap.status();
  e->cpu_memory_cap_mib = *cap;
  return absl::OkStatus();
}

// Exact for every double (17 significant digits), where StrCat keeps 6.
std::string DoubleText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> WriteRankEnv(const RankEnv& env) {
  for (const auto& [name, roots] :
       {std::pair{kOpenRootsEnv, &env.open_roots}, std::pair{kWriteRootsEnv, &env.write_roots}}) {
    for (const std::string& root : *roots) {
      if (absl::StrContains(root, ',')) {
        return Refuse(name, root, "holds a ',', which separates the roots");
      }
    }
  }
  std::map<std::string, std::string> out = {
      {kRankEnv, std::to_string(env.rank)},
      {kWorldSizeEnv, std::to_string(env.world_size)},
      {kLocalRankEnv, std::to_string(env.local_rank)},
      {kLocalWorldSizeEnv, env.local_world_size > 0 ? std::to_string(env.local_world_size) : ""},
      {kMasterAddrEnv, env.master_addr},
      {kCoordinatorEnv, env.coordinator},
      {kJobIdEnv, env.job_id},
      {kAttemptEnv, std::to_string(env.attempt)},
      {kRdzvNamespaceEnv, env.rdzv_namespace},
      {kRdzvSecretEnv, env.rdzv_secret},
      {kResumeFromJobEnv, env.resume_from_job},
      {kRankGenerationEnv, std::to_string(env.rank_generation)},
      {kAdvertiseAddressEnv, env.advertise_address},
      {kNodeNameEnv, env.node_name},
  };
  auto set_if = [&out](const char* name, const std::optional<std::string>& v) {
    if (v.has_value()) out[name] = *v;
  };
  if (env.resume_step.has_value()) out[kResumeStepEnv] = std::to_string(*env.resume_step);
  if (!env.open_roots.empty()) out[kOpenRootsEnv] = absl::StrJoin(env.open_roots, ",");
  if (!env.write_roots.empty()) out[kWriteRootsEnv] = absl::StrJoin(env.write_roots, ",");
  set_if(kCudaVisibleDevicesEnv, env.device.cuda_visible_devices);
  set_if(kCudaDeviceOrderEnv, env.device.cuda_device_order);
  set_if(kNcclSocketIfnameEnv, env.device.nccl_socket_ifname);
  if (env.master_port != 0) out[kMasterPortEnv] = std::to_string(env.master_port);
  if (!env.store_secret.empty()) out[kStoreSecretEnv] = env.store_secret;
  if (env.store_insecure) out[kStoreInsecureEnv] = "1";
  if (env.torchelastic_agent_store) out[kTorchElasticAgentStoreEnv] = "True";
  if (env.peak_flops.has_value()) out[kPeakFlopsEnv] = DoubleText(*env.peak_flops);
  if (env.cpu_memory_cap_mib.has_value()) {
    out[kCpuMemoryCapMibEnv] = DoubleText(*env.cpu_memory_cap_mib);
  }
  // What the trainer will make of it: the reader's rules are the one definition of well-formed.
  absl::StatusOr<RankEnv> back = ReadRankEnv([&out](const char* name) -> const char* {
    auto it = out.find(name);
    return it == out.end() ? nullptr : it->second.c_str();
  });
  if (!back.ok()) return back.status();
  return out;
}

absl::StatusOr<RankEnv> ReadRankEnv(const std::function<const char*(const char*)>& getenv_in) {
  const GetEnv getenv =
      getenv_in ? getenv_in : [](const char* n) -> const char* { return std::getenv(n); };
  RankEnv e;
  if (absl::Status s = ReadPlace(getenv, &e); !s.ok()) return s;
  if (absl::Status s = ReadMaster(getenv, &e); !s.ok()) return s;
  if (absl::Status s = ReadDaemon(getenv, &e); !s.ok()) return s;
  if (absl::Status s = ReadLauncherSettings(getenv, &e); !s.ok()) return s;
  return e;
}

}  // namespace shardline::launch
