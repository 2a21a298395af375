#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "hf/weight_map.h"
#include "hf/weights.h"
#include "proto/job_spec.pb.h"

namespace shardline::hf {
namespace {

std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

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
