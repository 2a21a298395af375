#include "trainer/config.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/open_beneath.h"
#include "common/status_macros.h"
#include "fsdp/engine_options_from_spec.h"
#include "fsdp/layout.h"
#include "proto/job_spec.pb.h"
#include "spec/job_spec.h"
#include "spec/path_policy.h"

namespace shardline::trainer {
namespace {

// An integer variable (int or int64_t); a malformed value is refused naming the variable.
template <typename Int>
absl::Status ReadInt(const std::function<const char*(const char*)>& getenv, const char* name,
                     Int* out, bool* present) {
  const char* v = getenv(name);
  *present = v != nullptr && *v != '\0';
  if (!*present) return absl::OkStatus();
  if (!absl::SimpleAtoi(v, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment ", name, "=\"", v, "\" is not an integer"));
  }
  return absl::OkStatus();
}

std::string ReadStr(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

absl::StatusOr<RankEnv> ReadRankEnv(const std::function<const char*(const char*)>& getenv_in) {
  const std::function<const char*(const char*)> getenv =
      getenv_in ? getenv_in : [](const char* n) -> const char* { return std::getenv(n); };
  RankEnv e;
  bool has_rank = false, has_world = false, has_local = false, has_port = false;
  RETURN_IF_ERROR(ReadInt(getenv, "RANK", &e.rank, &has_rank));
  RETURN_IF_ERROR(ReadInt(getenv, "WORLD_SIZE", &e.world_size, &has_world));
  RETURN_IF_ERROR(ReadInt(getenv, "LOCAL_RANK", &e.local_rank, &has_local));
  RETURN_IF_ERROR(ReadInt(getenv, "MASTER_PORT", &e.master_port, &has_port));
  if (!has_local) e.local_rank = e.rank;
  if (has_rank != has_world) {
    return absl::InvalidArgumentError(
        "environment: RANK and WORLD_SIZE must be set together (or neither, for one process)");
  }
  if (e.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment WORLD_SIZE=", e.world_size, " must be >= 1"));
  }
  if (e.rank < 0 || e.rank >= e.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment RANK=", e.rank, " is not in [0, WORLD_SIZE=", e.world_size, ")"));
  }
  e.master_addr = ReadStr(getenv, "MASTER_ADDR");
  e.coordinator = ReadStr(getenv, "SHARDLINE_COORDINATOR");
  e.rdzv_namespace = ReadStr(getenv, "SHARDLINE_RDZV_NAMESPACE");
  e.rdzv_secret = ReadStr(getenv, "SHARDLINE_RDZV_SECRET");
  e.job_id = ReadStr(getenv, "SHARDLINE_JOB_ID");
  bool has_attempt = false;
  RETURN_IF_ERROR(ReadInt(getenv, "SHARDLINE_ATTEMPT", &e.attempt, &has_attempt));
  bool has_generation = false;
  RETURN_IF_ERROR(
      ReadInt(getenv, "SHARDLINE_RANK_GENERATION", &e.rank_generation, &has_generation));
  if (e.rank_generation < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment SHARDLINE_RANK_GENERATION=", e.rank_generation, " is negative"));
  }
  for (absl::string_view root :
       absl::StrSplit(ReadStr(getenv, kOpenRootsEnv), ',', absl::SkipWhitespace())) {
    if (!absl::StartsWith(root, "/")) {
      return absl::InvalidArgumentError(absl::StrCat("environment ", kOpenRootsEnv, ": root \"",
                                                     root, "\" is not an absolute path"));
    }
    e.open_roots.push_back(spec::NormalizePath(root));
  }
  RETURN_IF_ERROR(ReadInt(getenv, "SHARDLINE_RESUME_STEP", &e.resume_step, &e.has_resume_step));
  if (e.has_resume_step && e.resume_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment SHARDLINE_RESUME_STEP=", e.resume_step, " is negative"));
  }
  e.resume_from_job = ReadStr(getenv, "SHARDLINE_RESUME_FROM_JOB");
  e.advertise_address = ReadStr(getenv, "SHARDLINE_ADVERTISE_ADDRESS");
  e.store_secret = ReadStr(getenv, "SHARDLINE_STORE_SECRET");
  const bool rendezvous = !e.coordinator.empty() && !e.rdzv_namespace.empty();
  const bool loopback =
      e.master_addr.empty() || e.master_addr == "localhost" || e.master_addr.rfind("127.", 0) == 0;
  if (e.world_size > 1 && !rendezvous) {
    if (e.master_addr.empty() || !has_port) {
      return absl::InvalidArgumentError(absl::StrCat(
          "environment: WORLD_SIZE=", e.world_size,
          " needs MASTER_ADDR and MASTER_PORT (the TCP store rank 0 serves), as torchrun sets"));
    }
    if (e.master_port <= 0 || e.master_port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment MASTER_PORT=", e.master_port, " is not a TCP port"));
    }
    // torchrun (torch.distributed.elastic) by default shares its agent's c10d TCPStore with the
    // ranks: MASTER_PORT is then that store, which rank 0 cannot bind and whose protocol is not
    // ours. Say so at once, on every rank, rather than rank 0 failing to bind while the others
    // wait for it.
    if (ReadStr(getenv, "TORCHELASTIC_USE_AGENT_STORE") == "True") {
      return absl::FailedPreconditionError(absl::StrCat(
          "environment TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves its own store "
          "on "
          "MASTER_PORT=",
          e.master_port,
          ", which rank 0 needs for Shardline's bootstrap store; launch with "
          "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment (and the c10d "
          "rendezvous: the default, or --standalone), so that torchrun hands the ranks a free "
          "MASTER_PORT"));
    }
    // Anyone who can reach MASTER_PORT could read and overwrite the bootstrap keys (and so
    // point ranks at their own Gloo peers): off loopback any host, on loopback any local user.
    // The store needs the launcher's secret either way.
    if (e.store_secret.empty() && ReadStr(getenv, "SHARDLINE_STORE_INSECURE") != "1") {
      return absl::InvalidArgumentError(absl::StrCat(
          "environment: MASTER_ADDR=", e.master_addr,
          loopback ? " is loopback (any local user can reach it)" : " is not loopback",
          " and SHARDLINE_STORE_SECRET is unset: give every rank the same random secret (e.g. "
          "`export SHARDLINE_STORE_SECRET=$(openssl rand -hex 32)`), or set "
          "SHARDLINE_STORE_INSECURE=1 to run the store without one"));
    }
  }
  if (e.advertise_address.empty()) {
    // Loopback jobs stay on loopback; otherwise bind where MASTER_ADDR's peers can reach us.
    char host[256] = {0};
    e.advertise_address =
        loopback ? "127.0.0.1" : (gethostname(host, sizeof(host) - 1) == 0 ? host : "");
  }
  e.node_name = ReadStr(getenv, "SHARDLINE_NODE_NAME");
  if (e.node_name.empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) == 0) e.node_name = host;
  }
  return e;
}

absl::StatusOr<TrainerConfig> LoadTrainerConfig(const std::string& spec_path,
                                                const std::vector<std::string>& overrides,
                                                const RankEnv& env) {
  spec::LoadOptions options;
  options.overrides = overrides;
  // The launcher's world size wins; appended last so it also beats a --set world_size.
  options.overrides.push_back(absl::StrCat("world_size=", env.world_size));
  // Peek at the spec's own world size for the log line (errors surface in the full load).
  {
    spec::LoadOptions peek = options;
    peek.overrides.pop_back();
    peek.validate.check_files = false;
    auto raw = spec::LoadJobSpecFile(spec_path, peek);
    if (raw.ok() && raw->world_size() != env.world_size) {
      SL_LOG(INFO) << "spec world_size " << raw->world_size() << " replaced by WORLD_SIZE "
                   << env.world_size << " from the environment";
    }
  }
  ASSIGN_OR_RETURN(JobSpec s, spec::LoadJobSpecFile(spec_path, options));

  TrainerConfig c;
  c.job_name = s.name();
  c.spec_yaml = spec::JobSpecToYaml(s);
  ASSIGN_OR_RETURN(c.model, models::ModelConfigFromSpec(s.model()));
  c.model.block_class = s.fsdp().block_class();  // A model-loading concern (script blocks).

  c.data_path = s.data().path();
  c.data_paths.assign(s.data().paths().begin(), s.data().paths().end());
  c.val_path = s.data().val_path();
  c.vocab_path = s.data().vocab_path();
  c.data_format = s.data().format() == DataSpec::TOKENS_U16   ? data::TokenFormat::kU16
                  : s.data().format() == DataSpec::TOKENS_U32 ? data::TokenFormat::kU32
                                                              : data::TokenFormat::kText;
  c.val_fraction = s.data().val_fraction();
  c.seq_len = s.data().seq_len();
  c.shuffle_seed = s.data().shuffle_seed();

  const OptimizerSpec& o = s.optimizer();
  c.optimizer = o.kind() == OptimizerSpec::SGD ? OptimizerKind::kSgd : OptimizerKind::kAdamW;
  c.lr = o.lr();
  c.min_lr = o.min_lr();
  c.weight_decay = o.weight_decay();
  c.beta1 = o.beta1();
  c.beta2 = o.beta2();
  c.eps = o.eps();
  c.momentum = o.momentum();
  c.grad_clip = o.grad_clip();
  c.warmup_steps = o.warmup_steps();

  const FsdpSpec& f = s.fsdp();
  ASSIGN_OR_RETURN(c.layout, fsdp::ParallelLayout::Create(s.world_size(), f.sharding_strategy(),
                                                          f.hybrid_shard_degree()));
  ASSIGN_OR_RETURN(c.engine, fsdp::EngineOptionsFromSpec(f));
  c.fake_collectives = f.fake_collectives();
  c.collective_timeout_s = f.collective_timeout_s();
  const FaultToleranceSpec& ft = s.fault_tolerance();
  c.replica_fault_tolerance = ft.mode() == FaultToleranceSpec::REPLICA_GROUPS;
  c.ft_min_replicas = ft.min_replicas();
  c.ft_digest_every_steps = ft.digest_every_steps();

  const TrainSpec& t = s.train();
  c.steps = t.steps();
  c.global_batch_size = t.global_batch_size();
  c.micro_batch_size = t.micro_batch_size();
  c.accumulation_steps = t.global_batch_size() / (t.micro_batch_size() * s.world_size());
  c.eval_every = t.eval_every();
  c.eval_batches = t.eval_batches();
  c.log_every = t.log_every();
  c.seed = t.seed();
  c.deterministic = t.deterministic();
  c.sample_tokens = t.sample_tokens();
  c.sample_prompt = t.sample_prompt();
  c.tensorboard_dir = t.tensorboard_dir();

  c.cuda = s.device().kind() == DeviceSpec::CUDA;
  c.cpu_threads = s.device().cpu_threads();
  c.allow_tf32 = s.device().allow_tf32();

  const CheckpointSpec& ck = s.checkpoint();
  c.checkpoint_dir = ck.dir();
  c.checkpoint_every_steps = ck.every_steps();
  c.checkpoint_keep_last = ck.keep_last();
  c.checkpoint_async = ck.async_save();
  c.checkpoint_save_final = ck.save_final();
  c.resume_step = ck.resume_step();
  c.resume_from = ck.resume_from();
  c.init_from_safetensors = ck.init_from_safetensors();
  return c;
}

}  // namespace shardline::trainer
