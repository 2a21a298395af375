#include "models/sample.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "common/torch_status.h"

namespace shardline::models {

absl::StatusOr<std::vector<int64_t>> Generate(LanguageModel& model,
                                              const std::vector<int64_t>& prompt,
                                              const SampleOptions& options, at::Device device) {
  if (prompt.empty()) return absl::InvalidArgumentError("sample prompt is empty");
  const bool was_training = model.module().is_training();
  model.module().eval();
  auto result = TorchTry("sample", [&] {
    torch::NoGradGuard no_grad;
    at::Generator gen = at::detail::createCPUGenerator(options.seed);
    std::vector<int64_t> context = prompt;
    std::vector<int64_t> out;
    const int64_t window = model.block_size() > 0 ? model.block_size() : 1024;
    for (int i = 0; i < options.num_tokens; ++i) {
      const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(context.size()) - window);
      at::Tensor ids =
          at::tensor(std::vector<int64_t>(context.begin() + start, context.end()), at::kLong)
              .unsqueeze(0)
              .to(device);
      at::Tensor all_logits = options.forward ? options.forward(ids) : model.Forward(ids);
      at::Tensor logits = all_logits.select(1, -1).squeeze(0).to(at::kCPU, at::kFloat);
      logits = logits / std::max(options.temperature, 1e-6);
      if (options.top_k > 0 && options.top_k < logits.size(0)) {
        at::Tensor kth = std::get<0>(logits.topk(options.top_k)).select(0, -1);
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
      }
      const int64_t next = at::multinomial(at::softmax(logits, -1), 1, false, gen).item<int64_t>();
      context.push_back(next);
      out.push_back(next);
    }
    return out;
  });
  model.module().train(was_training);
  return result;
}

}  // namespace shardline::models
