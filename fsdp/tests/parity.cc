#include "fsdp/tests/parity.h"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <utility>

#include <ATen/ATen.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/layout.h"
#include "fsdp/loss_scaler.h"
#include "fsdp/sharded_optimizer.h"
#include "fsdp/testing/tiny_gpt.h"

namespace shardline::fsdp::testing {
namespace {

// The configs name dtypes as LibTorch does (test tables print them); the engine takes its own.
Dtype EngineDtype(at::ScalarType t) {
  return t == at::kBFloat16 ? Dtype::kBFloat16 : t == at::kHalf ? Dtype::kFloat16 : Dtype::kFloat32;
}

constexpr double kLr = 3e-3, kWeightDecay = 0.1, kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-8;
constexpr double kClip = 1.0, kMomentum = 0.9, kSgdLr = 0.05, kSgdWeightDecay = 0.01;

TinyGptConfig ModelConfig() { return TinyGptConfig{}; }

// Learning rate of step s (0-based): a linear decay over 20 steps, so set_lr is exercised.
double LrAt(const ParityConfig& c, int step) {
  const double base = c.sgd ? kSgdLr : kLr;
  return base * (1.0 - 0.5 * step / 20.0);
}

// The global batch of step s: [global_batch, T + 1] tokens, a noisy affine sequence (learnable).
at::Tensor GlobalBatch(const ParityConfig& c, int step) {
  const TinyGptConfig m = ModelConfig();
  std::mt19937 rng(1000 + step);
  at::Tensor t = at::empty({c.global_batch, m.block_size + 1}, at::kLong);
  auto acc = t.accessor<int64_t, 2>();
  for (int b = 0; b < c.global_batch; ++b) {
    int64_t tok = rng() % m.vocab;
    for (int64_t i = 0; i <= m.block_size; ++i) {
      acc[b][i] = tok;
      tok = (tok * 7 + 3 + (rng() % 4 == 0 ? rng() % m.vocab : 0)) % m.vocab;
    }
  }
  return t;
}

TinyGpt MakeModel() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(1234);
  return TinyGpt(ModelConfig());
}

}  // namespace

std::string ParityConfig::Name() const {
  return absl::StrCat(strategy, "_W", world_size, "_S", hybrid_shard_degree, "_",
                      WrapPolicyName(wrap), "_mb", micro_batches, sgd ? "_sgd" : "_adamw",
                      prefetch == 0 ? "" : absl::StrCat("_prefetch", prefetch),
                      activation_checkpointing ? "_ac" : "", cpu_offload ? "_offload" : "",
                      device.is_cpu() ? "" : absl::StrCat("_", device.str()));
}

std::string ParityConfig::Encode() const {
  return absl::StrCat(strategy, ":", world_size, ":", hybrid_shard_degree, ":",
                      WrapPolicyName(wrap), ":", micro_batches, ":", sgd ? "sgd" : "adamw", ":",
                      prefetch, activation_checkpointing ? ":ac" : "");
}

absl::StatusOr<ParityConfig> ParityConfig::Decode(const std::string& s) {
  std::vector<std::string> f = absl::StrSplit(s, ':');
  if (f.size() != 7 && !(f.size() == 8 && f[7] == "ac")) {
    return absl::InvalidArgumentError(absl::StrCat("bad config ", s));
  }
  ParityConfig c;
  c.strategy = f[0];
  if (!absl::SimpleAtoi(f[1], &c.world_size) || !absl::SimpleAtoi(f[2], &c.hybrid_shard_degree) ||
      !absl::SimpleAtoi(f[4], &c.micro_batches) || !absl::SimpleAtoi(f[6], &c.prefetch)) {
    return absl::InvalidArgumentError(absl::StrCat("bad config ", s));
  }
  ASSIGN_OR_RETURN(c.wrap, ParseWrapPolicy(f[3]));
  c.sgd = f[5] == "sgd";
  c.activation_checkpointing = f.size() == 8;
  return c;
}

ParityResult RunReference(const ParityConfig& config) {
  TinyGpt model = MakeModel();
  std::vector<at::Tensor> params = model->parameters();  // Tied weight listed twice...
  std::vector<at::Tensor> unique;
  for (const at::Tensor& p : params) {
    bool seen = false;
    for (const at::Tensor& u : unique) seen = seen || u.is_same(p);
    if (!seen) unique.push_back(p);
  }
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (config.sgd) {
    opt = std::make_unique<torch::optim::SGD>(
        unique, torch::optim::SGDOptions(kSgdLr).momentum(kMomentum).weight_decay(kSgdWeightDecay));
  } else {
    opt = std::make_unique<torch::optim::AdamW>(unique, torch::optim::AdamWOptions(kLr)
                                                            .betas({kBeta1, kBeta2})
                                                            .eps(kEps)
                                                            .weight_decay(kWeightDecay));
  }
  ParityResult result;
  for (int step = 0; step < config.steps; ++step) {
    opt->param_groups()[0].options().set_lr(LrAt(config, step));
    opt->zero_grad();
    at::Tensor batch = GlobalBatch(config, step);
    at::Tensor loss = model->loss(batch.narrow(1, 0, batch.size(1) - 1),
                                  batch.narrow(1, 1, batch.size(1) - 1), nullptr);
    loss.backward();
    // SGD runs unclipped; a huge max_norm makes clip_grad_norm_ only measure.
    result.grad_norms.push_back(
        torch::nn::utils::clip_grad_norm_(unique, config.sgd ? 1e30 : kClip));
    opt->step();
    result.losses.push_back(loss.item<double>());
  }
  for (const auto& item : model->named_parameters()) {
    result.params[item.key()] = item.value().detach().clone();
  }
  return result;
}

absl::StatusOr<ParityResult> RunFsdpRank(const ParityConfig& config, int rank, Communicator* shard,
                                         Communicator* replicate,
                                         const std::map<std::string, at::Tensor>* resume) {
  ASSIGN_OR_RETURN(ParallelLayout layout, ParallelLayout::Create(config.world_size, config.strategy,
                                                                 config.hybrid_shard_degree));
  TinyGpt model = MakeModel();
  if (!config.device.is_cpu()) model->to(config.device);
  FsdpEngineOptions eo;
  eo.rank = rank;
  eo.wrap_policy.kind = config.wrap;
  eo.wrap_policy.block_type = "Block";
  eo.wrap_policy.min_num_params = config.min_num_params;
  eo.forward_prefetch = config.prefetch != 0;
  eo.backward_prefetch = config.prefetch == 1   ? FsdpEngineOptions::BackwardPrefetch::kPre
                         : config.prefetch == 2 ? FsdpEngineOptions::BackwardPrefetch::kPost
                                                : FsdpEngineOptions::BackwardPrefetch::kNone;
  eo.activation_checkpointing = config.activation_checkpointing;
  eo.param_dtype = EngineDtype(config.param_dtype);
  eo.reduce_dtype = EngineDtype(config.reduce_dtype);
  eo.cpu_offload = config.cpu_offload;
  eo.overlap_reduce = config.overlap_reduce;
  ASSIGN_OR_RETURN(std::unique_ptr<FsdpEngine> engine,
                   FsdpEngine::Create(model.ptr(), layout, shard, replicate, eo));
  ShardedOptimizerOptions oo;
  if (config.sgd) {
    oo.kind = ShardedOptimizerOptions::Kind::kSgd;
    oo.lr = kSgdLr;
    oo.momentum = kMomentum;
    oo.weight_decay = kSgdWeightDecay;
  } else {
    oo.lr = kLr;
    oo.beta1 = kBeta1;
    oo.beta2 = kBeta2;
    oo.eps = kEps;
    oo.weight_decay = kWeightDecay;
    oo.grad_clip = kClip;
    oo.fused = config.fused_optimizer;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> opt,
                   ShardedOptimizer::Create(engine.get(), oo));

  if (resume != nullptr) {
    RETURN_IF_ERROR(engine->LoadFullParamState(*resume));
    RETURN_IF_ERROR(opt->LoadFullState(*resume));
    opt->set_step_count(resume->at("step").item<int64_t>());
  }
  const int slices = config.identical_ranks ? 1 : config.world_size;
  const int per_rank = config.global_batch / slices;
  const int per_micro = per_rank / config.micro_batches;
  if (per_rank * slices != config.global_batch || per_micro * config.micro_batches != per_rank) {
    return absl::InvalidArgumentError(absl::StrCat("global batch ", config.global_batch,
                                                   " does not split into ", config.world_size,
                                                   " ranks x ", config.micro_batches));
  }
  std::optional<DynamicLossScaler> scaler;
  if (config.loss_scale > 0) {
    LossScalerOptions so;
    so.init_scale = config.loss_scale;
    so.growth_interval = 3;
    scaler.emplace(so);
  }
  ParityResult result;
  for (int step = config.start_step; step < config.start_step + config.steps; ++step) {
    engine->set_step(step);
    if (step == config.die_at_step) raise(SIGKILL);
    opt->set_lr(LrAt(config, step));
    at::Tensor batch = GlobalBatch(config, step)
                           .narrow(0, config.identical_ranks ? 0 : rank * per_rank, per_rank)
                           .to(config.device);
    double loss_sum = 0;
    for (int m = 0; m < config.micro_batches; ++m) {
      at::Tensor mb = batch.narrow(0, m * per_micro, per_micro);
      RETURN_IF_ERROR(engine->BeginForward());
      at::Tensor loss;
      RETURN_IF_ERROR(TorchCall("forward", [&] {
        loss = model->loss(mb.narrow(1, 0, mb.size(1) - 1), mb.narrow(1, 1, mb.size(1) - 1),
                           engine.get());
      }));
      loss_sum += loss.item<double>();
      at::Tensor scaled = loss / config.micro_batches;
      if (scaler.has_value()) scaled = scaled * scaler->scale();
      RETURN_IF_ERROR(engine->Backward(scaled, /*sync_gradients=*/m == config.micro_batches - 1));
    }
    if (scaler.has_value()) opt->set_grad_scale(scaler->scale());
    ASSIGN_OR_RETURN(double norm, opt->Step());
    if (scaler.has_value()) scaler->Update(opt->last_step_skipped());
    result.grad_norms.push_back(norm);
    result.losses.push_back(loss_sum / config.micro_batches);
  }
  if (scaler.has_value()) {
    result.skipped_steps = scaler->skipped_steps();
    result.final_loss_scale = scaler->scale();
  }
  ASSIGN_OR_RETURN(auto full, engine->FullParamState(/*rank0_only=*/true));
  for (auto& [name, t] : full) result.params[name] = t;
  if (config.save_state) {
    ASSIGN_OR_RETURN(auto params, engine->FullParamState(/*rank0_only=*/false));
    ASSIGN_OR_RETURN(auto opt_state, opt->FullState(/*rank0_only=*/false));
    for (auto& [name, t] : params) result.state[name] = t;
    for (auto& [name, t] : opt_state) result.state[name] = t;
    result.state["step"] = at::scalar_tensor(opt->step_count(), at::kLong);
  }
  return result;
}

absl::StatusOr<std::vector<double>> ReadGoldenLosses(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    double v = 0;
    if (f.size() != 2 || !absl::SimpleAtod(f[1], &v)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad line \"", line, "\""));
    }
    out.push_back(v);
  }
  return out;
}

std::string FormatGoldenLosses(const std::vector<double>& losses) {
  std::string out;
  for (size_t i = 0; i < losses.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%zu %.9g\n", i, losses[i]);
    out += buf;
  }
  return out;
}

}  // namespace shardline::fsdp::testing
