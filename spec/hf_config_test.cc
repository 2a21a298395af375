#include "spec/hf_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/job_spec.pb.h"

namespace shardline::spec {
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
  auto m = ModelSpecFromHfConfig(kLlama, "config.json");
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
      {Replace(kLlama, R"("rope_type": "default")", R"("rope_type": "yarn", "factor": 4.0)"),
       "rope_parameters.rope_type \"yarn\" is not implemented"},
      {Replace(kLlama, R"("rope_type": "default")", R"("rope_type": "llama3")"),
       "rope_parameters.factor is missing"},
      {Replace(kLlama, R"("rope_type": "default")",
               R"("rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                  "high_freq_factor": 1.0)"),
       "rope_scaling model.rope_scaling: low_freq_factor 4 and high_freq_factor 1 must satisfy"},
      {Replace(kLlama, R"("rope_type": "default")", R"("rope_type": "linear", "factor": 0.5)"),
       "factor: 0.5 must be at least 1"},
      {Replace(kLlama, R"("vocab_size": 97)", R"("vocab_size": 97, "mlp_bias": true)"),
       "mlp_bias true is not supported"},
      {Replace(kLlama, R"("vocab_size": 97)", R"("vocab_size": 97, "head_dim": 7)"),
       "head_dim 7 is odd"},
      {Replace(kLlama, R"("vocab_size": 97)", R"("vocab_size": 97, "partial_rotary_factor": 0.5)"),
       "partial_rotary_factor must be 1"},
      {Replace(kLlama, R"("num_key_value_heads": 2)", R"("num_key_value_heads": 3)"),
       "num_key_value_heads 3 does not divide num_attention_heads 4"},
      {Replace(Replace(kLlama, R"("llama")", R"("qwen2")"), R"("vocab_size": 97)",
               R"("vocab_size": 97, "use_sliding_window": true)"),
       "use_sliding_window true is not supported"},
      {Replace(Replace(kLlama, R"("llama")", R"("qwen3")"), R"("vocab_size": 97)",
               R"("vocab_size": 97, "layer_types": ["full_attention", "sliding_attention"])"),
       "layer_types[1] \"sliding_attention\" is not full_attention"},
      {Replace(kLlama, R"("vocab_size": 97)", R"("vocab_size": 97, "hidden_act": "gelu")"),
       "hidden_act \"gelu\" is not silu"},
      {Replace(kLlama, R"("llama")", R"("gemma")"), "model_type \"gemma\" is not one of"},
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
    auto m = ModelSpecFromHfConfig(json, "x/config.json");
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

// Each family's variant fields, and their defaults where config.json leaves them out.
TEST(HfConfig, LlamaFamilyVariantsAreRead) {
  auto llama3 = ModelSpecFromHfConfig(
      Replace(Replace(kLlama, R"("rope_type": "default")",
                      R"("rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16)"),
              R"("tie_word_embeddings": false)", R"("tie_word_embeddings": true, "head_dim": 16)"),
      "config.json");
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ(llama3->hf_model_type(), "llama");
  EXPECT_EQ(llama3->rope_scaling().type(), RopeScaling::LLAMA3);
  EXPECT_DOUBLE_EQ(llama3->rope_scaling().factor(), 8.0);
  EXPECT_EQ(llama3->rope_scaling().original_max_position_embeddings(), 16);
  EXPECT_DOUBLE_EQ(llama3->rope_theta(), 5000.0);
  EXPECT_EQ(llama3->head_dim(), 16);  // Not 32 / 4.
  EXPECT_TRUE(llama3->tie_embeddings());
  EXPECT_FALSE(llama3->attention_qkv_bias());

  auto qwen2 = ModelSpecFromHfConfig(Replace(kLlama, R"("llama")", R"("qwen2")"), "config.json");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_TRUE(qwen2->attention_qkv_bias());
  EXPECT_FALSE(qwen2->attention_out_bias());
  EXPECT_EQ(qwen2->head_dim(), 0) << "the width's split is left implicit";

  auto qwen3 = ModelSpecFromHfConfig(Replace(kLlama, R"("llama")", R"("qwen3")"), "config.json");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_TRUE(qwen3->qk_norm());
  EXPECT_EQ(qwen3->head_dim(), 128) << "Qwen3Config's default head_dim";

  auto mistral = ModelSpecFromHfConfig(
      Replace(Replace(kLlama, R"("llama")", R"("mistral")"), R"("vocab_size": 97)",
              R"("vocab_size": 97, "sliding_window": 8)"),
      "config.json");
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ(mistral->sliding_window(), 8);
  auto no_window = ModelSpecFromHfConfig(
      Replace(Replace(kLlama, R"("llama")", R"("mistral")"), R"("vocab_size": 97)",
              R"("vocab_size": 97, "sliding_window": null)"),
      "config.json");
  ASSERT_TRUE(no_window.ok()) << no_window.status();
  EXPECT_EQ(no_window->sliding_window(), 0);

  // Exported and read back, every variant is the same model of the same family.
  for (const ModelSpec* m : {&*llama3, &*qwen2, &*qwen3, &*mistral}) {
    auto json = HfConfigFromModelSpec(*m);
    ASSERT_TRUE(json.ok()) << json.status();
    auto back = ModelSpecFromHfConfig(*json, "exported");
    ASSERT_TRUE(back.ok()) << back.status() << *json;
    EXPECT_EQ(back->SerializeAsString(), m->SerializeAsString())
        << back->DebugString() << " vs " << m->DebugString();
  }
}

TEST(HfConfig, ExportFamilyIsChosenAndMustFitTheFields) {
  auto base = ModelSpecFromHfConfig(kLlama, "config.json");
  ASSERT_TRUE(base.ok()) << base.status();
  ModelSpec m = *base;
  m.clear_hf_model_type();
  EXPECT_EQ(*HfModelType(m), "llama");
  m.set_attention_qkv_bias(true);
  EXPECT_EQ(*HfModelType(m), "qwen2");
  m.set_qk_norm(true);
  EXPECT_FALSE(HfModelType(m).ok()) << "qwen3 biases q, k, v and o alike";
  m.set_attention_out_bias(true);
  EXPECT_EQ(*HfModelType(m), "qwen3");
  ModelSpec windowed = *base;
  windowed.clear_hf_model_type();
  windowed.set_sliding_window(16);
  EXPECT_EQ(*HfModelType(windowed), "mistral");
  windowed.set_hf_model_type("llama");
  absl::StatusOr<std::string> refused = HfModelType(windowed);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.hf_model_type: \"llama\" has no sliding window"),
            std::string::npos)
      << refused.status();
}

TEST(HfConfig, GptConfigHasNoEndOfTextIdOutsideASmallVocabulary) {
  ModelSpec m;
  m.set_architecture(ModelSpec::GPT);
  m.set_n_embd(64);
  m.set_n_layer(4);
  m.set_n_head(4);
  m.set_block_size(64);
  m.set_vocab_size(256);  // bytes: transformers' default 50256 is outside it
  auto small = HfConfigFromModelSpec(m);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_NE(small->find("\"bos_token_id\": null,\n  \"eos_token_id\": null,"), std::string::npos)
      << *small;
  m.set_vocab_size(50257);  // GPT-2's own vocabulary keeps <|endoftext|>
  auto gpt2 = HfConfigFromModelSpec(m);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_NE(gpt2->find("\"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,"), std::string::npos)
      << *gpt2;
  // Both still read back as the same model.
  for (const std::string* json : {&*small, &*gpt2}) {
    auto back = ModelSpecFromHfConfig(*json, "config.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->n_embd(), 64);
    EXPECT_EQ(back->block_size(), 64);
  }
}

}  // namespace
}  // namespace shardline::spec
