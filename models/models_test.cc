#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "common/torch_status.h"
#include "models/attention.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/model_factory.h"
#include "models/sample.h"

namespace shardline::models {
namespace {

// "llama-variants": llama-tiny with every variant field on (Qwen's biases and q/k norm, a
// head size apart from the width, a tied head, Llama 3.1 rope scaling, Mistral's window).
ModelConfig Preset(const std::string& name, uint64_t seed = 1) {
  const bool variants = name == "llama-variants";
  auto c = PresetModelConfig(variants ? "llama-tiny" : name, seed);
  EXPECT_TRUE(c.ok()) << c.status();
  if (variants) {
    c->head_dim = c->n_embd / c->n_head + 2;
    c->attention_qkv_bias = c->attention_out_bias = c->qk_norm = c->tie_embeddings = true;
    c->rope_scaling.type = spec::RotaryScaling::Type::kLlama3;
    c->rope_scaling.factor = 8;
    c->rope_scaling.low_freq_factor = 1;
    c->rope_scaling.high_freq_factor = 4;
    c->rope_scaling.original_max_position_embeddings = 16;
    c->sliding_window = 5;
  }
  return *c;
}

// Counts RunUnit calls and checks the engine sees the block modules.
class CountingRunner : public fsdp::UnitRunner {
 public:
  at::Tensor Run(const torch::nn::Module& module, const at::Tensor& input,
                 const fsdp::UnitBody& body) override {
    ++calls;
    last_type = module.name();
    return body(input);
  }
  int calls = 0;
  std::string last_type;
};

std::unique_ptr<LanguageModel> Make(const ModelConfig& spec) {
  auto m = CreateModel(spec);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

at::Tensor Tokens(int64_t b, int64_t t, uint64_t seed = 5) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randint(0, 256, {b, t}, gen, at::kLong);
}

class BuiltinModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BuiltinModelTest, ForwardShapeParameterCountAndHookCalls) {
  const ModelConfig spec = Preset(GetParam());
  auto model = Make(spec);
  EXPECT_EQ(model->NumParameters(), CountParameters(spec)) << model->Describe();
  CountingRunner runner;
  model->set_unit_runner(&runner);
  at::Tensor logits = model->Forward(Tokens(2, 16));
  EXPECT_EQ(logits.sizes(), (at::IntArrayRef{2, 16, 256}));
  EXPECT_EQ(runner.calls, spec.n_layer);
  EXPECT_NE(runner.last_type.find("BlockImpl"), std::string::npos) << runner.last_type;
  EXPECT_EQ(model->block_type(), "Block");
}

TEST_P(BuiltinModelTest, InitIsDeterministicFromSeed) {
  auto a = Make(Preset(GetParam(), 7)), b = Make(Preset(GetParam(), 7)),
       c = Make(Preset(GetParam(), 8));
  auto pa = a->module().named_parameters(), pb = b->module().named_parameters(),
       pc = c->module().named_parameters();
  bool any_differs = false;
  for (const auto& item : pa) {
    EXPECT_TRUE(at::equal(item.value(), pb[item.key()])) << item.key();
    any_differs |= !at::equal(item.value(), pc[item.key()]);
  }
  EXPECT_TRUE(any_differs);
}

TEST_P(BuiltinModelTest, IsCausal) {
  auto model = Make(Preset(GetParam()));
  model->module().eval();
  torch::NoGradGuard no_grad;
  at::Tensor x = Tokens(1, 12);
  at::Tensor y = x.clone();
  y[0][8] = (x[0][8].item<int64_t>() + 1) % 256;
  at::Tensor lx = model->Forward(x), ly = model->Forward(y);
  EXPECT_TRUE(at::allclose(lx.narrow(1, 0, 8), ly.narrow(1, 0, 8), 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(lx.narrow(1, 8, 4), ly.narrow(1, 8, 4)));
}

TEST_P(BuiltinModelTest, LearnsAFixedBatch) {
  auto model = Make(Preset(GetParam()));
  at::Tensor x = Tokens(4, 32), target = Tokens(4, 32, 9);
  std::vector<at::Tensor> params = model->module().parameters();
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    at::Tensor loss = at::cross_entropy_loss(model->Forward(x).view({-1, 256}), target.view(-1));
    loss.backward();
    {
      torch::NoGradGuard no_grad;
      for (auto& p : params) p.sub_(p.grad() * 0.5);  // Plain SGD.
    }
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_NEAR(first, std::log(256.0), 0.3);  // Small init: near-uniform predictions.
  EXPECT_LT(last, first - 0.5);
}

// The fused at::scaled_dot_product_attention path (what training uses) against the explicit
// formula: the same logits and parameter gradients within float32 rounding.
TEST_P(BuiltinModelTest, SdpaMatchesExplicitAttentionInLogitsAndGradients) {
  ModelConfig spec = Preset(GetParam(), 3);
  spec.dropout = 0.0;
  auto fused = Make(spec);
  spec.attention = AttentionKernel::kExplicit;
  auto explicit_math = Make(spec);
  at::Tensor x = Tokens(3, 24), target = Tokens(3, 24, 11);
  at::Tensor logits[2];
  LanguageModel* models[2] = {fused.get(), explicit_math.get()};
  for (int i = 0; i < 2; ++i) {
    logits[i] = models[i]->Forward(x);
    at::cross_entropy_loss(logits[i].view({-1, 256}), target.view(-1)).backward();
  }
  EXPECT_TRUE(at::allclose(logits[0], logits[1], 1e-4, 1e-5))
      << (logits[0] - logits[1]).abs().max().item<float>();
  auto pf = fused->module().named_parameters(), pe = explicit_math->module().named_parameters();
  for (const auto& item : pf) {
    const at::Tensor gf = item.value().grad(), ge = pe[item.key()].grad();
    ASSERT_TRUE(gf.defined() && ge.defined()) << item.key();
    EXPECT_TRUE(at::allclose(gf, ge, 1e-3, 1e-6))
        << item.key() << " max diff " << (gf - ge).abs().max().item<float>() << " of "
        << ge.abs().max().item<float>();
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, BuiltinModelTest,
                         ::testing::Values("tiny", "llama-tiny", "llama-variants"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

TEST(LlamaModel, TiedHeadIsTheEmbeddingOneParameter) {
  ModelConfig spec = Preset("llama-variants");
  auto model = Make(spec);
  auto params = model->module().named_parameters();
  EXPECT_EQ(params.find("output.weight"), nullptr);
  ASSERT_NE(params.find("tok_embeddings.weight"), nullptr);
  ASSERT_NE(params.find("layers.0.attention.q_norm.weight"), nullptr);
  EXPECT_EQ(params["layers.0.attention.wq.weight"].size(0), spec.n_head * spec.head_dim);
  EXPECT_EQ(params["layers.0.attention.wo.weight"].size(1), spec.n_head * spec.head_dim);
  // The head's gradient lands on the embedding.
  at::Tensor x = Tokens(2, 12);
  model->Forward(x).sum().backward();
  at::Tensor g = params["tok_embeddings.weight"].grad();
  ASSERT_TRUE(g.defined());
  // Rows of tokens the batch never holds get gradient only through the head.
  EXPECT_GT(g.index({255}).abs().sum().item<float>(), 0.0f);
}

TEST(CausalAttention, SlidingWindowSeesOnlyTheLastWPositions) {
  at::Generator gen = at::detail::createCPUGenerator(6);
  const int64_t t = 12, w = 4;
  at::Tensor q = at::randn({1, 2, t, 8}, gen, at::kDouble),
             k = at::randn({1, 2, t, 8}, gen, at::kDouble),
             v = at::randn({1, 2, t, 8}, gen, at::kDouble);
  for (AttentionKernel kernel : {AttentionKernel::kSdpa, AttentionKernel::kExplicit}) {
    at::Tensor a = CausalAttention(q, k, v, 0.0, kernel, w);
    // Changing keys and values at positions <= t - 1 - w leaves the last position unchanged;
    // changing position t - w changes it.
    at::Tensor k2 = k.clone(), v2 = v.clone();
    k2.narrow(2, 0, t - w).normal_(0, 1, gen);
    v2.narrow(2, 0, t - w).normal_(0, 1, gen);
    at::Tensor b = CausalAttention(q, k2, v2, 0.0, kernel, w);
    EXPECT_TRUE(at::allclose(a.select(2, t - 1), b.select(2, t - 1), 1e-12, 1e-12));
    EXPECT_FALSE(at::allclose(a.select(2, t - w), b.select(2, t - w), 1e-6, 1e-6));
    // A window as long as the sequence is plain causal attention.
    EXPECT_TRUE(at::allclose(CausalAttention(q, k, v, 0.0, kernel, t),
                             CausalAttention(q, k, v, 0.0, kernel), 1e-12, 1e-12));
  }
  EXPECT_TRUE(at::allclose(CausalAttention(q, k, v, 0.0, AttentionKernel::kSdpa, w),
                           CausalAttention(q, k, v, 0.0, AttentionKernel::kExplicit, w), 1e-10,
                           1e-12));
}

TEST(GptModel, Gpt2PresetHas124MParameters) {
  ModelConfig spec = Preset("gpt2");
  auto model = Make(spec);
  EXPECT_EQ(model->NumParameters(), 124439808);
}

TEST(CreateModel, RejectsBadSizes) {
  ModelConfig m = Preset("tiny");
  m.n_head = 5;
  auto bad = CreateModel(m);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("n_head 5"), absl::string_view::npos);
  EXPECT_EQ(PresetModelConfig("nope", 1).status().message(),
            "model.preset: \"nope\" is not one of tiny, small, gpt2, llama-tiny");
}

TEST(TorchScriptModel, LoadsMirrorsParametersAndTrains) {
  ModelConfig spec;
  spec.architecture = Architecture::kTorchScript;
  spec.torchscript_path = "models/testdata/tiny_lm.pt";
  spec.vocab_size = 256;
  auto model = Make(spec);
  EXPECT_EQ(model->block_type(), "");
  auto named = model->module().named_parameters();
  ASSERT_TRUE(named.contains("embed.weight"));
  ASSERT_TRUE(named.contains("head.bias"));
  EXPECT_EQ(model->NumParameters(), 256 * 32 + 32 * 32 + 32 + 32 * 256 + 256);

  at::Tensor x = Tokens(2, 8);
  at::Tensor before = model->Forward(x).detach().clone();
  at::Tensor loss = model->Forward(x).sum();
  loss.backward();
  ASSERT_TRUE(named["mix.weight"].grad().defined());
  {
    torch::NoGradGuard no_grad;
    named["head.bias"].add_(1.0);  // Updating the mirrored tensor updates the script.
  }
  EXPECT_TRUE(at::allclose(model->Forward(x), before + 1.0, 1e-5, 1e-5));
}

TEST(TorchScriptModel, MissingOrInvalidFile) {
  ModelConfig spec;
  spec.architecture = Architecture::kTorchScript;
  spec.torchscript_path = "/no/such/model.pt";
  EXPECT_EQ(CreateModel(spec).status().code(), absl::StatusCode::kNotFound);
  spec.torchscript_path = "models/models_test";  // Exists, not a script.
  auto bad = CreateModel(spec);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("is not a TorchScript module"), absl::string_view::npos)
      << bad.status();
}

ModelConfig ScriptConfig(const std::string& file, const std::string& block_class) {
  ModelConfig spec;
  spec.architecture = Architecture::kTorchScript;
  spec.torchscript_path = "models/testdata/" + file;
  spec.vocab_size = 256;
  spec.block_class = block_class;
  return spec;
}

// Records the modules RunUnit is called with, and runs the body twice like activation
// checkpointing's recompute (the first result without grad, as the checkpointer does).
class RecordingRunner : public fsdp::UnitRunner {
 public:
  at::Tensor Run(const torch::nn::Module& module, const at::Tensor& input,
                 const fsdp::UnitBody& body) override {
    modules.push_back(&module);
    if (recompute) {
      torch::NoGradGuard no_grad;
      (void)body(input);
    }
    return body(input);
  }
  std::vector<const torch::nn::Module*> modules;
  bool recompute = false;
};

// A scripted model in ordinary PyTorch style (models/testdata/make_blocks_lm.py: a ModuleList of
// Blocks called from a helper method with a mask argument, a tied head): each block call goes
// through RunUnit with that block's mirror module, and outputs and gradients are those of the
// unrewritten script.
TEST(TorchScriptModel, BlockClassCallsRunUnitPerBlockWithSameOutputsAndGradients) {
  auto plain = Make(ScriptConfig("blocks_lm.pt", ""));
  auto blocked = Make(ScriptConfig("blocks_lm.pt", "Block"));
  EXPECT_EQ(plain->block_type(), "");
  EXPECT_EQ(blocked->block_type(), "Block");
  EXPECT_NE(blocked->Describe().find("4 Block blocks as FSDP hook points"), std::string::npos)
      << blocked->Describe();
  EXPECT_EQ(blocked->NumParameters(), 220544);  // The tied head counted once.
  auto named = blocked->module().named_modules();
  ASSERT_TRUE(named.contains("blocks.2"));
  EXPECT_EQ(named["blocks.2"]->name(), "Block");
  EXPECT_EQ(named["blocks.2.attn"]->name(), "SelfAttention");
  EXPECT_EQ(named["ln_f"]->name(), "LayerNorm");

  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute);
    RecordingRunner runner;
    runner.recompute = recompute;
    blocked->set_unit_runner(&runner);
    const at::Tensor x = Tokens(2, 16);
    at::Tensor want = plain->Forward(x);
    at::Tensor got = blocked->Forward(x);
    ASSERT_EQ(runner.modules.size(), 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(runner.modules[i], named["blocks." + std::to_string(i)].get()) << i;
    }
    EXPECT_TRUE(at::equal(got, want));
    plain->module().zero_grad();
    blocked->module().zero_grad();
    want.square().mean().backward();
    got.square().mean().backward();
    auto p = plain->module().named_parameters();
    auto b = blocked->module().named_parameters();
    for (const auto& item : p) {
      ASSERT_TRUE(b[item.key()].grad().defined()) << item.key();
      EXPECT_TRUE(at::allclose(b[item.key()].grad(), item.value().grad(), 1e-6, 1e-7))
          << item.key();
    }
    blocked->set_unit_runner(nullptr);
  }

  // The mask buffer is mirrored too (the same tensor): device moves and rank 0's broadcast reach
  // the script. Unmasked, position 0 sees the whole sequence and its logits change.
  auto buffers = blocked->module().named_buffers();
  ASSERT_TRUE(buffers.contains("mask"));
  torch::NoGradGuard no_grad;
  const at::Tensor x = Tokens(1, 8);
  const at::Tensor masked = blocked->Forward(x);
  buffers["mask"].fill_(1);
  EXPECT_FALSE(at::allclose(blocked->Forward(x).select(1, 0), masked.select(1, 0)));
}

TEST(TorchScriptModel, BlockClassRefusalsNameTheFieldClassAndMethod) {
  struct Row {
    std::string file, block_class, message;
  };
  const std::vector<Row> rows = {
      {"blocks_lm.pt", "Blok",
       "fsdp.block_class: no submodule of the TorchScript model has class \"Blok\"; its "
       "classes: "},
      {"unsupported_blocks_lm.pt", "ScaledBlock",
       "fsdp.block_class: ScaledBlock.forward takes \"scale: float\"; a block's forward must "
       "take Tensor arguments only"},
      {"unsupported_blocks_lm.pt", "PairBlock",
       "fsdp.block_class: PairBlock.forward returns Tuple[Tensor, Tensor]; a block's forward "
       "must return one Tensor"},
      {"unsupported_blocks_lm.pt", "StepBlock",
       "fsdp.block_class: StepBlock.step is called from outside the block; only calls of a "
       "block's forward"},
  };
  for (const Row& row : rows) {
    auto model = CreateModel(ScriptConfig(row.file, row.block_class));
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << row.block_class;
    EXPECT_NE(model.status().message().find(row.message), absl::string_view::npos)
        << model.status();
    EXPECT_NE(model.status().message().find(row.file), absl::string_view::npos) << model.status();
  }
  // The list of classes names the real one.
  auto missing = CreateModel(ScriptConfig("blocks_lm.pt", "Blok"));
  EXPECT_NE(missing.status().message().find("Block, BlocksLm"), absl::string_view::npos)
      << missing.status();
  // A dotted name matches by suffix; the module path is not a class.
  EXPECT_TRUE(CreateModel(ScriptConfig("blocks_lm.pt", "__torch__.Block")).ok());
  EXPECT_FALSE(CreateModel(ScriptConfig("blocks_lm.pt", "blocks")).ok());
}

// An engine status thrown inside a block (a lost peer) comes out of Forward unchanged, although
// the TorchScript interpreter rewraps exceptions.
TEST(TorchScriptModel, EngineStatusThrownInsideABlockComesBackUnchanged) {
  class FailingRunner : public fsdp::UnitRunner {
   public:
    at::Tensor Run(const torch::nn::Module&, const at::Tensor&, const fsdp::UnitBody&) override {
      throw StatusException(absl::UnavailableError("all_gather on shard[0]: peer 2 is gone"));
    }
  };
  auto model = Make(ScriptConfig("blocks_lm.pt", "Block"));
  FailingRunner runner;
  model->set_unit_runner(&runner);
  absl::Status s = TorchCall("forward", [&] { model->Forward(Tokens(1, 8)); });
  EXPECT_EQ(s, absl::UnavailableError("all_gather on shard[0]: peer 2 is gone"));
  model->set_unit_runner(nullptr);
  EXPECT_TRUE(TorchCall("forward", [&] { model->Forward(Tokens(1, 8)); }).ok());
}

TEST(Generate, IsDeterministicForASeed) {
  auto model = Make(Preset("tiny"));
  SampleOptions opts;
  opts.num_tokens = 20;
  opts.seed = 3;
  auto a = Generate(*model, {70, 105}, opts, at::kCPU);
  auto b = Generate(*model, {70, 105}, opts, at::kCPU);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 20u);
  EXPECT_EQ(*a, *b);
  EXPECT_TRUE(model->module().is_training());  // Mode restored.
  EXPECT_EQ(Generate(*model, {}, opts, at::kCPU).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CausalAttention, SdpaEqualsExplicitFormulaInFloat64WithAShortQueryBlock) {
  at::Generator gen = at::detail::createCPUGenerator(4);
  for (int64_t t : {1, 7, 33}) {
    at::Tensor q = at::randn({2, 3, t, 8}, gen, at::kDouble),
               k = at::randn({2, 3, t, 8}, gen, at::kDouble),
               v = at::randn({2, 3, t, 8}, gen, at::kDouble);
    at::Tensor a = CausalAttention(q, k, v, 0.0, AttentionKernel::kSdpa);
    at::Tensor b = CausalAttention(q, k, v, 0.0, AttentionKernel::kExplicit);
    EXPECT_TRUE(at::allclose(a, b, 1e-10, 1e-12)) << "T " << t;
    // Causal: the first position sees only itself.
    EXPECT_TRUE(at::allclose(b.select(2, 0), v.select(2, 0), 1e-12, 1e-12)) << "T " << t;
  }
}

}  // namespace
}  // namespace shardline::models
