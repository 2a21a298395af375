#include "spec/validate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fsdp/layout.h"
#include "google/protobuf/message.h"
#include "google/protobuf/unknown_field_set.h"
#include "spec/checkpoint_sources.h"
#include "spec/model_presets.h"
#include "spec/path_policy.h"
#include "spec/rope.h"
#include "spec/shown.h"

namespace shardline::spec {
namespace {

// Collects problems; each is "<path>: <value> <what is wrong>".
class Problems {
 public:
  template <typename... Args>
  void Add(const Args&... parts) {
    list_.push_back(absl::StrCat(parts...));
  }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    if (list_.size() == 1) return absl::InvalidArgumentError(list_[0]);
    return absl::InvalidArgumentError(
        absl::StrCat("job spec has ", list_.size(), " errors:\n  ", absl::StrJoin(list_, "\n  ")));
  }

 private:
  std::vector<std::string> list_;
};

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Fields this binary's JobSpec does not define (a newer client, or a crafted request) are kept by
// protobuf as unknown fields, stored with the job and copied into every START: refuse them,
// naming where they are. At most kMaxShown are listed, so a flood of them is one message.
void CheckUnknownFields(const google::protobuf::Message& m, const std::string& path, int* count,
                        Problems* p) {
  constexpr int kMaxShown = 5;
  const google::protobuf::Reflection* r = m.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = r->GetUnknownFields(m);
  for (int i = 0; i < unknown.field_count(); ++i) {
    if (++*count <= kMaxShown) {
      p->Add(path.empty() ? "" : absl::StrCat(path, "."), "#", unknown.field(i).number(),
             ": unknown field (not in this coordinator's JobSpec; is the client newer?)");
    }
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string name = path.empty() ? f->name() : absl::StrCat(path, ".", f->name());
    if (!f->is_repeated()) {
      CheckUnknownFields(r->GetMessage(m, f), name, count, p);
      continue;
    }
    for (int i = 0; i < r->FieldSize(m, f); ++i) {
      CheckUnknownFields(r->GetRepeatedMessage(m, f, i), absl::StrCat(name, "[", i, "]"), count, p);
    }
  }
}

void CheckNoUnknownFields(const JobSpec& s, Problems* p) {
  int count = 0;
  CheckUnknownFields(s, "", &count, p);
  if (count > 5) p->Add("... and ", count - 5, " more unknown fields");
}

// The checks ValidateForScheduling shares with Validate (one copy of each message).
void CheckNameAndWorldSize(const JobSpec& s, Problems* p) {
  if (!ValidName(s.name())) {
    p->Add("name: \"", Shown(s.name()), "\" must be 1-64 characters of [a-zA-Z0-9._-]");
  }
  if (s.world_size() <= 0) p->Add("world_size: ", s.world_size(), " must be positive");
}

void CheckMaxRestarts(const JobSpec& s, Problems* p) {
  if (s.restart().max_restarts() < 0) {
    p->Add("restart.max_restarts: ", s.restart().max_restarts(), " must be >= 0");
  }
}

void CheckMinWorldSize(const JobSpec& s, Problems* p) {
  const int min_w = s.elastic().min_world_size();
  if (min_w < 0 || (s.world_size() > 0 && min_w > s.world_size())) {
    p->Add("elastic.min_world_size: ", min_w, " is not in [0, world_size = ", s.world_size(), "]");
  }
}

// fault_tolerance REPLICA_GROUPS needs R = W / S >= 2 replica groups (docs/failures.md), each
// holding a whole copy of the state; min_replicas counts them (0 takes the default 1).
void CheckFaultTolerance(const JobSpec& s, Problems* p) {
  const FaultToleranceSpec& ft = s.fault_tolerance();
  if (ft.mode() != FaultToleranceSpec::MODE_UNSPECIFIED && ft.mode() != FaultToleranceSpec::NONE &&
      ft.mode() != FaultToleranceSpec::REPLICA_GROUPS) {
    p->Add("fault_tolerance.mode: ", static_cast<int>(ft.mode()), " is not NONE or REPLICA_GROUPS");
    return;
  }
  if (ft.vote_timeout_s() < 0) {
    p->Add("fault_tolerance.vote_timeout_s: ", ft.vote_timeout_s(), " must be >= 0");
  }
  if (ft.digest_every_steps() < 0) {
    p->Add("fault_tolerance.digest_every_steps: ", ft.digest_every_steps(), " must be >= 0");
  }
  if (ft.mode() != FaultToleranceSpec::REPLICA_GROUPS) return;
  const FsdpSpec::ShardingStrategy strategy = s.fsdp().sharding_strategy();
  if (strategy != FsdpSpec::HYBRID_SHARD && strategy != FsdpSpec::HYBRID_SHARD_ZERO2 &&
      strategy != FsdpSpec::NO_SHARD) {
    // Unspecified is the default FULL_SHARD (a spec sent as a proto may not be defaulted).
    const std::string name = strategy == FsdpSpec::SHARDING_STRATEGY_UNSPECIFIED ? "FULL_SHARD"
                             : FsdpSpec::ShardingStrategy_IsValid(strategy)
                                 ? FsdpSpec::ShardingStrategy_Name(strategy)
                                 : absl::StrCat(static_cast<int>(strategy));
    p->Add("fault_tolerance.mode REPLICA_GROUPS needs replica groups: fsdp.sharding_strategy ",
           name,
           strategy == FsdpSpec::SHARD_GRAD_OP
               ? " shards the optimizer state and gradients over all W ranks"
               : " shards every parameter over all W ranks",
           ", so a lost rank loses state no other rank holds; use HYBRID_SHARD or "
           "HYBRID_SHARD_ZERO2 (replica groups of fsdp.hybrid_shard_degree ranks) or NO_SHARD "
           "(every rank a replica)");
    return;
  }
  if (s.world_size() < 1) return;
  auto layout = fsdp::ParallelLayout::Create(s.world_size(), s.fsdp().sharding_strategy(),
                                             s.fsdp().hybrid_shard_degree());
  if (!layout.ok()) return;  // CheckLayout names it
  const int r = layout->replicate_degree();
  if (r < 2) {
    p->Add("fault_tolerance.mode REPLICA_GROUPS needs at least 2 replica groups, but world_size ",
           s.world_size(), " / shard degree ", layout->shard_degree(), " = ", r,
           ": with one copy of the state a lost rank loses state no other rank holds");
  }
  const int min_replicas = ft.min_replicas() == 0 ? 1 : ft.min_replicas();
  if (min_replicas < 1 || (r >= 2 && min_replicas > r)) {
    p->Add("fault_tolerance.min_replicas: ", ft.min_replicas(), " is not in [1, ", r,
           "] (the job's replica groups: world_size / shard degree)");
  }
  const int min_w = s.elastic().min_world_size();
  if (min_w > 0 && min_w < s.world_size()) {
    p->Add("fault_tolerance.mode REPLICA_GROUPS cannot be combined with elastic.min_world_size ",
           min_w, " below world_size ", s.world_size(),
           ": an elastic restart changes the replica groups, while fault tolerance keeps them and "
           "replaces a lost one; leave elastic.min_world_size unset");
  }
}

void CheckLayout(const JobSpec& s, Problems* p) {
  if (s.world_size() >= 1) {
    // The same rules the engine and coordinator apply (fsdp/layout.h), so the messages agree.
    auto layout = fsdp::ParallelLayout::Create(s.world_size(), s.fsdp().sharding_strategy(),
                                               s.fsdp().hybrid_shard_degree());
    if (!layout.ok()) p->Add(layout.status().message());
  }
}

// A spec whose model comes from model.hf_dir, not yet resolved (the coordinator cannot read the
// folder: sizes are filled and checked where the files are, by shardctl and the trainer).
bool UnresolvedHf(const ModelSpec& m) {
  return !m.hf_dir().empty() && m.architecture() == ModelSpec::ARCHITECTURE_UNSPECIFIED;
}

void CheckReadableDir(const std::string& path_field, const std::string& path, Problems* p) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    p->Add(path_field, ": \"", Shown(path), "\" does not exist");
  } else if (!S_ISDIR(st.st_mode)) {
    p->Add(path_field, ": \"", Shown(path), "\" is not a directory");
  } else if (access(path.c_str(), R_OK | X_OK) != 0) {
    p->Add(path_field, ": \"", Shown(path), "\" is not readable");
  }
}

void CheckReadableFile(const std::string& path_field, const std::string& path, Problems* p) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    p->Add(path_field, ": \"", Shown(path), "\" does not exist");
  } else if (!S_ISREG(st.st_mode)) {
    p->Add(path_field, ": \"", Shown(path), "\" is not a regular file");
  } else if (access(path.c_str(), R_OK) != 0) {
    p->Add(path_field, ": \"", Shown(path), "\" is not readable");
  }
}

// The checkpoint root need not exist yet (the trainer creates it), but its nearest existing
// ancestor must be a directory this process may write, or the first save fails mid-job.
void CheckWritableDir(const std::string& path_field, const std::string& path, Problems* p) {
  std::string dir = path;
  struct stat st;
  while (!dir.empty() && stat(dir.c_str(), &st) != 0) {
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "" : (slash == 0 ? "/" : dir.substr(0, slash));
  }
  if (dir.empty()) return;  // relative and nothing exists: the trainer's working dir decides
  if (!S_ISDIR(st.st_mode)) {
    p->Add(path_field, ": \"", Shown(path), "\" cannot be created: \"", Shown(dir),
           "\" is not a directory");
  } else if (access(dir.c_str(), W_OK | X_OK) != 0) {
    p->Add(path_field, ": \"", Shown(path), "\" cannot be created: \"", Shown(dir),
           "\" is not writable");
  }
}

void ValidateLlamaFields(const ModelSpec& m, Problems* p) {
  const bool llama = m.architecture() == ModelSpec::LLAMA;
  if (m.n_kv_head() < 0) {
    p->Add("model.n_kv_head: ", m.n_kv_head(), " must be >= 0");
  } else if (m.n_kv_head() > 0 && !llama) {
    p->Add("model.n_kv_head: ", m.n_kv_head(), " is only used by LLAMA models");
  } else if (m.n_kv_head() > 0 && m.n_head() > 0 && m.n_head() % m.n_kv_head() != 0) {
    p->Add("model.n_kv_head: ", m.n_kv_head(), " does not divide model.n_head ", m.n_head());
  }
  for (auto [field, value] :
       {std::pair<const char*, double>{"rope_theta", m.rope_theta()}, {"norm_eps", m.norm_eps()}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      p->Add("model.", field, ": ", value, " must be >= 0 (0: the default)");
    } else if (value > 0 && !llama) {
      p->Add("model.", field, ": ", value, " is only used by LLAMA models");
    }
  }
  for (auto [field, value] : {std::pair<const char*, int32_t>{"head_dim", m.head_dim()},
                              {"sliding_window", m.sliding_window()}}) {
    if (value < 0) {
      p->Add("model.", field, ": ", value, " must be >= 0 (0: none)");
    } else if (value > 0 && !llama) {
      p->Add("model.", field, ": ", value, " is only used by LLAMA models");
    }
  }
  if (m.head_dim() % 2 != 0) {
    p->Add("model.head_dim: ", m.head_dim(), " is odd; rotary embeddings need an even one");
  }
  for (auto [field, value] :
       {std::pair<const char*, bool>{"attention_qkv_bias", m.attention_qkv_bias()},
        {"attention_out_bias", m.attention_out_bias()},
        {"qk_norm", m.qk_norm()},
        {"tie_embeddings", m.tie_embeddings()}}) {
    if (value && !llama) {
      p->Add("model.", field, ": true is only used by LLAMA models",
             m.architecture() == ModelSpec::GPT && std::string(field) == "tie_embeddings"
                 ? " (GPT's head is always tied)"
                 : "");
    }
  }
  if (m.rope_scaling().type() != RopeScaling::NONE && !llama) {
    p->Add("model.rope_scaling: is only used by LLAMA models");
  } else if (llama) {
    if (absl::Status s = ValidateRopeScaling(RopeScalingFromSpec(m)); !s.ok()) p->Add(s.message());
  }
}

void ValidateModel(const JobSpec& s, Problems* p) {
  const ModelSpec& m = s.model();
  if (!m.hf_dir().empty() && m.architecture() == ModelSpec::TORCHSCRIPT) {
    p->Add("model.hf_dir: \"", Shown(m.hf_dir()), "\" is not used with architecture TORCHSCRIPT");
  }
  if (UnresolvedHf(m)) return;  // Checked where the folder is read.
  ValidateLlamaFields(m, p);
  if (m.architecture() == ModelSpec::TORCHSCRIPT) {
    if (m.torchscript_path().empty()) {
      p->Add("model.torchscript_path: must be set for architecture TORCHSCRIPT");
    }
  } else {
    if (!m.torchscript_path().empty()) {
      p->Add("model.torchscript_path: \"", Shown(m.torchscript_path()),
             "\" is only used with architecture TORCHSCRIPT, not ",
             ModelSpec::Architecture_Name(m.architecture()));
    }
    if (m.n_embd() <= 0) p->Add("model.n_embd: ", m.n_embd(), " must be positive");
    if (m.n_layer() <= 0) p->Add("model.n_layer: ", m.n_layer(), " must be positive");
    if (m.n_head() <= 0) p->Add("model.n_head: ", m.n_head(), " must be positive");
    const bool own_head_dim = m.architecture() == ModelSpec::LLAMA && m.head_dim() > 0;
    if (own_head_dim) {
      // The width need not split into heads: q is n_head x head_dim wide.
    } else if (m.n_embd() > 0 && m.n_head() > 0 && m.n_embd() % m.n_head() != 0) {
      p->Add("model.n_embd: ", m.n_embd(), " is not divisible by model.n_head ", m.n_head());
    } else if (m.architecture() == ModelSpec::LLAMA && m.n_head() > 0 &&
               (m.n_embd() / m.n_head()) % 2 != 0) {
      p->Add("model.n_embd: ", m.n_embd(), " / n_head ", m.n_head(),
             " gives an odd head size; rotary embeddings need an even one");
    }
    if (m.ffn_hidden() < 0) p->Add("model.ffn_hidden: ", m.ffn_hidden(), " must be >= 0");
    if (m.ffn_hidden() > 0 && m.architecture() != ModelSpec::LLAMA) {
      p->Add("model.ffn_hidden: ", m.ffn_hidden(), " is only used by LLAMA models");
    }
  }
  if (m.vocab_size() <= 0) {
    p->Add("model.vocab_size: ", m.vocab_size(), " must be positive");
  } else if (s.data().format() == DataSpec::TEXT && m.vocab_size() < 256) {
    p->Add("model.vocab_size: ", m.vocab_size(),
           " is below 256, which the byte-level tokenizer of TEXT data needs");
  } else if (s.data().format() == DataSpec::TOKENS_U16 && m.vocab_size() > 65536) {
    p->Add("model.vocab_size: ", m.vocab_size(), " does not fit TOKENS_U16 data (max 65536)");
  }
  if (m.architecture() == ModelSpec::TORCHSCRIPT ? m.block_size() < 0 : m.block_size() <= 0) {
    // A TorchScript model may leave it 0 (unknown); data.seq_len then sets the length.
    p->Add("model.block_size: ", m.block_size(), " must be positive");
  }
  if (!(m.dropout() >= 0 && m.dropout() < 1)) {
    p->Add("model.dropout: ", m.dropout(), " is not in [0, 1)");
  }
}

void ValidateData(const JobSpec& s, Problems* p) {
  const DataSpec& d = s.data();
  if (d.path().empty() && d.paths_size() == 0) {
    p->Add("data.path: must name the training data file (or data.paths the files)");
  } else if (!d.path().empty() && d.paths_size() > 0) {
    p->Add("data.path: \"", Shown(d.path()), "\" and data.paths are both set; use one of them");
  }
  if (!(d.val_fraction() >= 0 && d.val_fraction() <= 0.5)) {
    p->Add("data.val_fraction: ", d.val_fraction(), " is not in [0, 0.5]");
  } else if (!d.val_path().empty() && d.val_fraction() != 0) {
    p->Add("data.val_fraction: ", d.val_fraction(),
           " must be 0 when data.val_path names the validation file");
  }
  if (UnresolvedHf(s.model()) && d.seq_len() == 0) {
    // data.seq_len defaults to block_size, known once model.hf_dir is read.
  } else if (d.seq_len() <= 0) {
    p->Add("data.seq_len: ", d.seq_len(), " must be positive");
  } else if (s.model().architecture() != ModelSpec::TORCHSCRIPT && !UnresolvedHf(s.model()) &&
             d.seq_len() > s.model().block_size()) {
    p->Add("data.seq_len: ", d.seq_len(), " exceeds model.block_size ", s.model().block_size());
  }
}

void ValidateOptimizer(const JobSpec& s, Problems* p) {
  const OptimizerSpec& o = s.optimizer();
  if (!(o.lr() > 0) || !std::isfinite(o.lr())) p->Add("optimizer.lr: ", o.lr(), " must be > 0");
  if (!(o.weight_decay() >= 0)) {
    p->Add("optimizer.weight_decay: ", o.weight_decay(), " must be >= 0");
  }
  if (!(o.beta1() >= 0 && o.beta1() < 1))
    p->Add("optimizer.beta1: ", o.beta1(), " is not in [0, 1)");
  if (!(o.beta2() >= 0 && o.beta2() < 1))
    p->Add("optimizer.beta2: ", o.beta2(), " is not in [0, 1)");
  if (!(o.eps() > 0)) p->Add("optimizer.eps: ", o.eps(), " must be > 0");
  if (!(o.momentum() >= 0 && o.momentum() < 1)) {
    p->Add("optimizer.momentum: ", o.momentum(), " is not in [0, 1)");
  }
  if (!(o.grad_clip() >= 0)) p->Add("optimizer.grad_clip: ", o.grad_clip(), " must be >= 0");
  if (o.warmup_steps() < 0) p->Add("optimizer.warmup_steps: ", o.warmup_steps(), " must be >= 0");
  if (o.lr() > 0 && !(o.min_lr() >= 0 && o.min_lr() <= o.lr())) {
    p->Add("optimizer.min_lr: ", o.min_lr(), " is not in [0, lr = ", o.lr(), "]");
  }
}

// fsdp.block_class: a dotted class name, for TORCHSCRIPT models only; TRANSFORMER_BLOCK needs it
// there. Whether the class exists in the file is checked where the model is loaded (the trainer,
// models/script_blocks.h): the CLI and the coordinator do not link LibTorch.
void ValidateBlockClass(const JobSpec& s, Problems* p) {
  const FsdpSpec& f = s.fsdp();
  const bool script = s.model().architecture() == ModelSpec::TORCHSCRIPT;
  if (f.block_class().empty()) {
    if (script && f.auto_wrap_policy() == FsdpSpec::TRANSFORMER_BLOCK) {
      p->Add(
          "fsdp.block_class: must name the TorchScript model's block class (e.g. \"Block\") "
          "for auto_wrap_policy TRANSFORMER_BLOCK; or choose SIZE_BASED, PER_LAYER or "
          "PER_PARAMETER (then the model has no hook points)");
    }
    return;
  }
  bool name_ok = f.block_class().size() <= 256;
  for (absl::string_view part : absl::StrSplit(f.block_class(), '.')) {
    name_ok = name_ok && !part.empty() && !absl::ascii_isdigit(part[0]);
    for (char c : part) name_ok = name_ok && (absl::ascii_isalnum(c) || c == '_');
  }
  if (!name_ok) {
    p->Add("fsdp.block_class: \"", Shown(f.block_class()),
           "\" is not a class name (Python identifiers separated by dots, at most 256 bytes)");
  } else if (!script) {
    p->Add("fsdp.block_class: \"", Shown(f.block_class()),
           "\" is only used with architecture TORCHSCRIPT (built-in models wrap their own blocks), "
           "not ",
           ModelSpec::Architecture_Name(s.model().architecture()));
  }
}

void ValidateFsdp(const JobSpec& s, Problems* p) {
  const FsdpSpec& f = s.fsdp();
  CheckLayout(s, p);
  if (f.auto_wrap_policy() == FsdpSpec::SIZE_BASED && f.min_num_params() <= 0) {
    p->Add("fsdp.min_num_params: ", f.min_num_params(), " must be positive for SIZE_BASED");
  }
  ValidateBlockClass(s, p);
  if (f.collective_timeout_s() <= 0) {
    p->Add("fsdp.collective_timeout_s: ", f.collective_timeout_s(), " must be positive");
  }
  if (s.device().kind() == DeviceSpec::CPU) {
    if (f.cpu_offload()) {
      p->Add(
          "fsdp.cpu_offload: true needs device.kind CUDA; a CPU job keeps everything in host "
          "memory already");
    }
  }
}

void ValidateTrain(const JobSpec& s, Problems* p) {
  const TrainSpec& t = s.train();
  if (t.steps() <= 0) p->Add("train.steps: ", t.steps(), " must be positive");
  if (t.micro_batch_size() <= 0) {
    p->Add("train.micro_batch_size: ", t.micro_batch_size(), " must be positive");
  }
  if (t.global_batch_size() <= 0) {
    p->Add("train.global_batch_size: ", t.global_batch_size(), " must be positive");
  }
  if (t.micro_batch_size() > 0 && t.global_batch_size() > 0 && s.world_size() > 0) {
    const int64_t per_round = static_cast<int64_t>(t.micro_batch_size()) * s.world_size();
    if (t.global_batch_size() % per_round != 0) {
      p->Add("train.global_batch_size: ", t.global_batch_size(),
             " is not divisible by micro_batch_size * world_size = ", t.micro_batch_size(), " * ",
             s.world_size(), " = ", per_round);
    }
  }
  if (t.eval_every() < 0) p->Add("train.eval_every: ", t.eval_every(), " must be >= 0");
  if (t.eval_batches() <= 0) p->Add("train.eval_batches: ", t.eval_batches(), " must be positive");
  if (t.log_every() <= 0) p->Add("train.log_every: ", t.log_every(), " must be positive");
  if (t.sample_tokens() < 0) p->Add("train.sample_tokens: ", t.sample_tokens(), " must be >= 0");
  if (s.model().architecture() != ModelSpec::TORCHSCRIPT && s.model().block_size() > 0 &&
      static_cast<int64_t>(t.sample_prompt().size()) >= s.model().block_size()) {
    p->Add("train.sample_prompt: ", t.sample_prompt().size(), " bytes do not fit model.block_size ",
           s.model().block_size());
  }
}

void ValidateRest(const JobSpec& s, Problems* p) {
  CheckNameAndWorldSize(s, p);
  const CheckpointSpec& c = s.checkpoint();
  if (c.every_steps() < 0) p->Add("checkpoint.every_steps: ", c.every_steps(), " must be >= 0");
  if (c.keep_last() < 0) p->Add("checkpoint.keep_last: ", c.keep_last(), " must be >= 0");
  if (c.resume_step() < -1) {
    p->Add("checkpoint.resume_step: ", c.resume_step(), " must be -1 (latest), 0 or a step");
  }
  const std::pair<const char*, const std::string*> starts[] = {
      {"init_from_safetensors", &c.init_from_safetensors()},
      {"resume_from", &c.resume_from()},
      {"init_from_dcp", &c.init_from_dcp()}};
  for (int j = 1; j < 3; ++j) {
    for (int i = 0; i < j; ++i) {
      if (starts[i].second->empty() || starts[j].second->empty()) continue;
      p->Add("checkpoint.", starts[j].first, ": set with checkpoint.", starts[i].first, " (",
             *starts[i].second, "); a job starts from one of them");
    }
  }
  if (!c.resume_from().empty() && c.resume_step() == 0) {
    p->Add("checkpoint.resume_from: set with checkpoint.resume_step 0 (start from scratch)");
  }
  if (c.dir().empty() && (c.every_steps() > 0 || c.save_final())) {
    p->Add(
        "checkpoint.dir: must be set when checkpoint.every_steps or save_final asks for "
        "checkpoints");
  }
  CheckMaxRestarts(s, p);
  if (s.restart().backoff_s() < 0) {
    p->Add("restart.backoff_s: ", s.restart().backoff_s(), " must be >= 0");
  }
  CheckMinWorldSize(s, p);
  CheckFaultTolerance(s, p);
  if (s.device().kind() == DeviceSpec::KIND_UNSPECIFIED) {
    p->Add("device.kind: must be CPU or CUDA");
  }
  if (s.device().cpu_threads() < 0) {
    p->Add("device.cpu_threads: ", s.device().cpu_threads(), " must be >= 0");
  }
  if (s.device().allow_tf32() && s.device().kind() == DeviceSpec::CPU) {
    p->Add("device.allow_tf32: true needs device.kind CUDA (TensorFloat-32 is a GPU matmul mode)");
  }
}

}  // namespace

absl::Status Validate(const JobSpec& spec, const ValidateOptions& options) {
  Problems p;
  CheckNoUnknownFields(spec, &p);
  ValidateRest(spec, &p);
  ValidateModel(spec, &p);
  ValidateData(spec, &p);
  ValidateOptimizer(spec, &p);
  ValidateFsdp(spec, &p);
  ValidateTrain(spec, &p);
  if (options.check_files) {
    // Every path field (path_policy.h keeps the one list): files readable, checkpoint dir
    // creatable.
    for (const SpecPath& f : SpecPaths(spec)) {
      if (f.access == SpecPath::Access::kRead) {
        CheckReadableFile(f.field, f.path, &p);
      } else if (f.access == SpecPath::Access::kReadDir ||
                 f.access == SpecPath::Access::kCheckpointRead) {
        CheckReadableDir(f.field, f.path, &p);
      } else {
        CheckWritableDir(f.field, f.path, &p);
      }
    }
    for (const std::string& problem : CheckpointSourceProblems(spec.checkpoint())) p.Add(problem);
  }
  return p.ToStatus();
}

absl::Status ValidateForScheduling(const JobSpec& spec) {
  Problems p;
  CheckNoUnknownFields(spec, &p);
  CheckNameAndWorldSize(spec, &p);
  CheckMaxRestarts(spec, &p);
  CheckMinWorldSize(spec, &p);
  CheckLayout(spec, &p);
  CheckFaultTolerance(spec, &p);
  return p.ToStatus();
}

}  // namespace shardline::spec
