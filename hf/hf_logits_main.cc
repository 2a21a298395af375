// hf_logits: our model's next-token logits for a transformers folder, for hf_logits_test.py.
//
//   hf_logits HF_DIR TOKENS OUT [STEP_DIR]
//
// Builds our model from HF_DIR/config.json, loads the folder's weights (hf/weights.h) or, with
// STEP_DIR, a Shardline checkpoint's (our names), runs TOKENS ("1,2,3") as one sequence in eval
// mode and writes the [T, V] float32 logits to OUT (raw, row-major). Exit 0, or 1 with the error.
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint_reader.h"
#include "hf/model_config.h"
#include "hf/weights.h"
#include "models/model_factory.h"

namespace {

using shardline::hf::HostTensor;

absl::StatusOr<std::map<std::string, HostTensor>> FromCheckpoint(const std::string& step_dir) {
  auto reader = shardline::checkpoint::CheckpointReader::OpenDir(step_dir);
  if (!reader.ok()) return reader.status();
  std::map<std::string, HostTensor> out;
  for (const auto& t : (*reader)->meta().tensors) {
    if (t.name.find('#') != std::string::npos) continue;  // optimizer state
    HostTensor h;
    h.shape = t.shape;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    h.values.resize(static_cast<size_t>(n));
    absl::Status s = (*reader)->ReadElements(t.name, 0, n, h.values.data());
    if (!s.ok()) return s;
    out[t.name] = std::move(h);
  }
  return out;
}

absl::Status Run(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    return absl::InvalidArgumentError("usage: hf_logits HF_DIR TOKENS OUT [STEP_DIR]");
  }
  auto config = shardline::hf::ModelConfigFromHfDir(argv[1]);
  if (!config.ok()) return config.status();
  auto model = shardline::models::CreateModel(*config);
  if (!model.ok()) return model.status();
  auto weights = argc == 5 ? FromCheckpoint(argv[4]) : shardline::hf::ReadHfWeights(argv[1]);
  if (!weights.ok()) return weights.status();
  torch::NoGradGuard no_grad;
  for (auto& item : (*model)->module().named_parameters(/*recurse=*/true)) {
    auto it = weights->find(item.key());
    if (it == weights->end())
      return absl::NotFoundError(absl::StrCat("no weights for ", item.key()));
    at::Tensor src = at::from_blob(it->second.values.data(), it->second.shape, at::kFloat);
    if (src.sizes() != item.value().sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          item.key(), ": shape ", src.sizes().vec().size(), "-d differs from the model's"));
    }
    item.value().copy_(src);
  }
  std::vector<int64_t> ids;
  for (absl::string_view part : absl::StrSplit(argv[2], ',')) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) return absl::InvalidArgumentError("bad TOKENS");
    ids.push_back(id);
  }
  (*model)->module().eval();
  at::Tensor tokens = at::tensor(ids, at::kLong).unsqueeze(0);
  at::Tensor logits = (*model)->Forward(tokens).squeeze(0).contiguous().to(at::kFloat);
  std::ofstream out(argv[3], std::ios::binary);
  out.write(static_cast<const char*>(logits.data_ptr()), logits.numel() * sizeof(float));
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", argv[3]));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::Status s = Run(argc, argv);
  if (!s.ok()) {
    std::cerr << "hf_logits: " << s << "\n";
    return 1;
  }
  return 0;
}
