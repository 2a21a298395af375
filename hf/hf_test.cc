#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "hf/config.h"
#include "hf/weight_map.h"
#include "hf/weights.h"
#include "proto/job_spec.pb.h"

namespace shardline::hf {
namespace {

constexpr char kLlama[] = R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 72,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
  "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
  "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}, "tie_word_embeddings": false})";

std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  s.replace(s.find(from), from.size(), to);
  return s;
}

TEST(HfConfig, LlamaSizesRopeThetaAndKvHeadsAreRead) {
  auto m = ModelSpecFromConfigJson(kLlama, "config.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->architecture(), ModelSpec::LLAMA);
  EXPECT_EQ(m->n_embd(), 32);
  EXPECT_EQ(m->n_kv_head(), 2);
  EXPECT_EQ(m->ffn_hidden(), 72);
  EXPECT_EQ(m->block_size(), 64);
  EXPECT_DOUBLE_EQ(m->rope_theta(), 5000.0);
  EXPECT_DOUBLE_EQ(m->norm_eps(), 1e-6);
}

TEST(HfConfig, UnsupportedFeaturesAreRefusedNamingTheKey) {
  const std::pair<std::string, std::string> cases[] = {
      {Replace(kLlama, R"("rope_type": "default")", R"("rope_type": "llama3")"),
       "rope_parameters.rope_type \"llama3\" is not implemented"},
      {Replace(kLlama, R"("vocab_size": 97)", R"("vocab_size": 97, "attention_bias": true)"),
       "attention_bias true is not supported"},
      {Replace(kLlama, R"("vocab_size": 97)", R"("vocab_size": 97, "head_dim": 16)"),
       "head_dim 16 is not hidden_size / num_attention_heads = 8"},
      {Replace(kLlama, R"("num_key_value_heads": 2)", R"("num_key_value_heads": 3)"),
       "num_key_value_heads 3 does not divide num_attention_heads 4"},
      {Replace(kLlama, R"("llama")", R"("mistral")"), "model_type \"mistral\" is not one of"},
      {R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 97,
          "n_positions": 64, "n_inner": 64})",
       "n_inner 64 is not 4 * n_embd = 128"},
      {R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 97,
          "n_positions": 64, "activation_function": "relu"})",
       "activation_function \"relu\" is not gelu_new"},
      {R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 97,
          "n_positions": 64, "tie_word_embeddings": false})",
       "tie_word_embeddings false is not supported"},
  };
  for (const auto& [json, message] : cases) {
    auto m = ModelSpecFromConfigJson(json, "x/config.json");
    ASSERT_FALSE(m.ok()) << message;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(message), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find("x/config.json: "), std::string::npos) << m.status();
  }
}

TEST(HfConfig, ResolveFillsZeroFieldsAndRefusesDisagreement) {
  const std::string dir = TempDir("resolve");
  WriteFile(dir + "/config.json", kLlama);
  ModelSpec m;
  m.set_hf_dir(dir);
  m.set_block_size(32);  // A shorter rotary table is allowed.
  ASSERT_TRUE(ResolveHfModel(&m).ok());
  EXPECT_EQ(m.architecture(), ModelSpec::LLAMA);
  EXPECT_EQ(m.n_layer(), 2);
  EXPECT_EQ(m.block_size(), 32);
  ASSERT_TRUE(ResolveHfModel(&m).ok()) << "resolving twice is a no-op";
  m.set_n_layer(3);
  absl::Status s = ResolveHfModel(&m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model.n_layer: 3 does not match"), std::string::npos) << s;
  ModelSpec missing;
  missing.set_hf_dir(dir + "/nope");
  EXPECT_EQ(ResolveHfModel(&missing).code(), absl::StatusCode::kNotFound);
}

TEST(HfWeightMap, RotaryPermutationAndTransposeInvertEachOther) {
  TensorMapping q{"q", "q", Layout::kRotaryHalves, 2};
  // 2 heads of D = 4, 1 column: file rows per head are [a0 a1 | b0 b1] (halves); ours pair them.
  const std::vector<float> file = {0, 1, 2, 3, 10, 11, 12, 13};
  const std::vector<float> ours = ToOurs(q, {8, 1}, file);
  EXPECT_EQ(ours, (std::vector<float>{0, 2, 1, 3, 10, 12, 11, 13}));
  EXPECT_EQ(FromOurs(q, {8, 1}, ours), file);
  TensorMapping t{"t", "t", Layout::kTransposed};
  const std::vector<float> conv = {1, 2, 3, 4, 5, 6};  // file [2, 3]
  const std::vector<float> linear = ToOurs(t, {3, 2}, conv);
  EXPECT_EQ(linear, (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(FromOurs(t, {3, 2}, linear), conv);
}

TEST(HfWeights, ShardedIndexIsReadAndAFileOutsideTheFolderIsRefused) {
  const std::string dir = TempDir("sharded");
  WriteFile(dir + "/config.json", R"({"model_type": "gpt2", "n_embd": 4, "n_layer": 1,
      "n_head": 2, "vocab_size": 5, "n_positions": 3})");
  ModelSpec spec;
  spec.set_architecture(ModelSpec::GPT);
  spec.set_n_layer(1);
  std::vector<checkpoint::SafetensorsTensor> a, b;
  std::string index = R"({"metadata": {}, "weight_map": {)";
  int i = 0;
  for (const TensorMapping& m : Gpt2Mapping(spec)) {
    std::vector<int64_t> shape = {4};
    if (m.ours == "wte.weight") shape = {5, 4};
    if (m.ours == "wpe.weight") shape = {3, 4};
    if (m.layout == Layout::kTransposed)
      shape = m.ours.find("c_attn") != std::string::npos       ? std::vector<int64_t>{4, 12}
              : m.ours.find("c_fc") != std::string::npos       ? std::vector<int64_t>{4, 16}
              : m.ours.find("mlp.c_proj") != std::string::npos ? std::vector<int64_t>{16, 4}
                                                               : std::vector<int64_t>{4, 4};
    if (m.ours.find("c_attn.bias") != std::string::npos) shape = {12};
    if (m.ours.find("c_fc.bias") != std::string::npos) shape = {16};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n), static_cast<float>(i));
    checkpoint::SafetensorsTensor t{m.hf_name, "F32", shape,
                                    std::string(reinterpret_cast<char*>(v.data()), n * 4)};
    (i % 2 == 0 ? a : b).push_back(t);
    index += absl::StrCat(i == 0 ? "" : ",", "\"", m.hf_name, "\": \"",
                          i % 2 == 0 ? "a.safetensors" : "b.safetensors", "\"");
    ++i;
  }
  index += "}}";
  ASSERT_TRUE(checkpoint::WriteSafetensors(dir + "/a.safetensors", a, {}).ok());
  ASSERT_TRUE(checkpoint::WriteSafetensors(dir + "/b.safetensors", b, {}).ok());
  WriteFile(dir + "/model.safetensors.index.json", index);
  auto w = ReadHfWeights(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->size(), static_cast<size_t>(i));
  EXPECT_EQ(w->at("blocks.0.attn.c_attn.weight").shape, (std::vector<int64_t>{12, 4}));
  EXPECT_EQ(w->at("wpe.weight").values[0], 1.0f);

  WriteFile(dir + "/model.safetensors.index.json",
            R"({"weight_map": {"transformer.wte.weight": "../a.safetensors"}})");
  auto bad = ReadHfWeights(dir);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("is not a plain file name"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace shardline::hf
