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
