// Sharded loading of TorchScript files (models/torchscript_file.h): with InitMode::kDeferred the
// parameters hold no memory, every other tensor holds the file's values, and any range the
// initializer reads equals torch::jit::load's values bit for bit, for every layout a file can
// hold; files that cannot be split load whole and say why.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "fsdp/param_init.h"
#include "gtest/gtest.h"
#include "models/init.h"
#include "models/model_factory.h"
#include "models/torchscript_file.h"

namespace shardline::models {
namespace {

ModelConfig ScriptConfig(const std::string& file) {
  ModelConfig spec;
  spec.architecture = Architecture::kTorchScript;
  spec.torchscript_path = "models/testdata/" + file;
  spec.vocab_size = 256;
  return spec;
}

std::unique_ptr<LanguageModel> Make(const std::string& file, InitMode mode) {
  auto model = CreateModel(ScriptConfig(file), mode);
  EXPECT_TRUE(model.ok()) << file << ": " << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

at::Tensor Tokens() { return at::arange(16, at::kLong).view({2, 8}).mul(37).remainder(256); }

// blocks_lm: a tied head, a mask buffer; layout_lm (make_layout_lm.py): a transposed weight, two
// parameters in one storage at different offsets, a buffer and a plain tensor attribute.
TEST(ScriptFileLoad, DeferredParametersAreStoragelessAndEveryRangeEqualsTheWholeLoad) {
  for (const std::string file : {"tiny_lm.pt", "blocks_lm.pt", "layout_lm.pt"}) {
    SCOPED_TRACE(file);
    auto whole = Make(file, InitMode::kMaterialized);
    auto deferred = Make(file, InitMode::kDeferred);
    ASSERT_NE(deferred, nullptr);
    ASSERT_NE(deferred->deferred_init(), nullptr) << deferred->Describe();
    EXPECT_NE(deferred->Describe().find("parameters read from the file shard by shard"),
              std::string::npos)
        << deferred->Describe();
    EXPECT_EQ(deferred->NumParameters(), whole->NumParameters());
    auto want = whole->module().named_parameters();
    for (const auto& item : deferred->module().named_parameters()) {
      EXPECT_TRUE(fsdp::IsStorageless(item.value())) << item.key();
      EXPECT_EQ(item.value().requires_grad(), want[item.key()].requires_grad()) << item.key();
    }
    auto want_buffers = whole->module().named_buffers();
    for (const auto& item : deferred->module().named_buffers()) {
      EXPECT_TRUE(at::equal(item.value(), want_buffers[item.key()])) << item.key();
    }
    // The whole value, and ranges as a rank's shards ask for them (a middle slice, one element).
    std::set<const c10::TensorImpl*> visited;
    ASSERT_TRUE(deferred->deferred_init()
                    ->ForEach([&](const std::string& name, const fsdp::InitialValue& value) {
                      const at::Tensor full = want[name].detach().reshape({-1});
                      const int64_t n = value.numel();
                      EXPECT_EQ(n, full.numel()) << name;
                      at::Tensor got = at::empty({n});
                      value.CopyRange(0, n, got);
                      EXPECT_TRUE(at::equal(got, full)) << name;
                      const int64_t a = n / 3, b = n - n / 5;
                      at::Tensor part = at::empty({b - a});
                      value.CopyRange(a, b, part);
                      EXPECT_TRUE(at::equal(part, full.narrow(0, a, b - a))) << name;
                      at::Tensor last = at::empty({1}, at::kBFloat16);
                      value.CopyRange(n - 1, n, last);
                      EXPECT_TRUE(at::equal(last, full.narrow(0, n - 1, 1).to(at::kBFloat16)));
                      EXPECT_TRUE(visited.insert(want[name].unsafeGetTensorImpl()).second)
                          << name << " visited twice";
                      return absl::OkStatus();
                    })
                    .ok());
    std::set<const c10::TensorImpl*> unique;
    for (const at::Tensor& p : whole->module().parameters()) unique.insert(p.unsafeGetTensorImpl());
    EXPECT_EQ(visited.size(), unique.size());
    // Materialized from the file, the model computes what the whole load computes (the plain
    // tensor attribute of layout_lm included).
    ASSERT_TRUE(MaterializeParameters(deferred->module(), *deferred->deferred_init()).ok());
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(at::equal(deferred->Forward(Tokens()), whole->Forward(Tokens())));
  }
}

TEST(ScriptFileLoad, TensorConstantsLoadWholeAndSaySo) {
  auto deferred = Make("constant_lm.pt", InitMode::kDeferred);
  ASSERT_NE(deferred, nullptr);
  EXPECT_EQ(deferred->deferred_init(), nullptr);
  EXPECT_NE(deferred->Describe().find("loaded whole (its code has tensor constants)"),
            std::string::npos)
      << deferred->Describe();
  for (const auto& item : deferred->module().named_parameters()) {
    EXPECT_FALSE(fsdp::IsStorageless(item.value())) << item.key();
  }
  auto whole = Make("constant_lm.pt", InitMode::kMaterialized);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(deferred->Forward(Tokens()), whole->Forward(Tokens())));
}

TEST(ScriptFileLoad, NotATorchScriptFileIsAnError) {
  ModelConfig spec = ScriptConfig("make_layout_lm.py");
  auto bad = CreateModel(spec, InitMode::kDeferred);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("is not a TorchScript module"), std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("make_layout_lm.py"), std::string::npos);
}

// A file cut short (a copy interrupted mid-way): a clear error naming the field and the file,
// whichever way it is loaded.
TEST(ScriptFileLoad, TruncatedFileIsAnErrorNamingIt) {
  std::ifstream in("models/testdata/layout_lm.pt", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100000u);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/truncated_lm.pt";
  std::ofstream(path, std::ios::binary).write(bytes.data(), 100000);
  ModelConfig spec = ScriptConfig("layout_lm.pt");
  spec.torchscript_path = path;
  for (InitMode mode : {InitMode::kDeferred, InitMode::kMaterialized}) {
    auto bad = CreateModel(spec, mode);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
    EXPECT_NE(bad.status().message().find("model.torchscript_path: \"" + path + "\""),
              std::string::npos)
        << bad.status();
  }
}

}  // namespace
}  // namespace shardline::models
