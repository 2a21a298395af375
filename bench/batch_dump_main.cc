// batch_dump: writes the global training batches our trainer reads, step by step, so that a
// reference implementation (bench/fsdp_vs_torch.py's PyTorch side) trains on exactly the same
// token rows in the same order.
//
//   batch_dump --data=data/tinyshakespeare.txt --seq_len=128 --val_fraction=0.1
//              --global_batch_size=16 --shuffle_seed=7 --steps=20 --out=batches.bin
//
// Output: raw little-endian int64, shape [steps, G, T + 1]: for each step the G training
// sequences (inputs and the shifted targets, as data::ReadBatch cuts them) in global-batch
// position order. data::DistributedSampler gives rank r of W, micro-step m (B = micro batch),
// positions [m*W*B + r*B, m*W*B + (r+1)*B) of that order, and its epoch order does not depend on
// W, so one file serves every world size: the reader slices it the same way.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "data/sampler.h"
#include "data/token_dataset.h"

ABSL_FLAG(std::string, data, "", "text file (byte tokens), as data.path");
ABSL_FLAG(int, seq_len, 64, "data.seq_len");
ABSL_FLAG(double, val_fraction, 0.1, "data.val_fraction");
ABSL_FLAG(int, global_batch_size, 16, "train.global_batch_size");
ABSL_FLAG(uint64_t, shuffle_seed, 7, "data.shuffle_seed");
ABSL_FLAG(int, steps, 20, "optimizer steps to dump");
ABSL_FLAG(std::string, out, "batches.bin", "output file");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace shardline::data;
  auto dataset =
      TokenDataset::Open({absl::GetFlag(FLAGS_data), TokenFormat::kText,
                          absl::GetFlag(FLAGS_val_fraction), absl::GetFlag(FLAGS_seq_len), 256});
  if (!dataset.ok()) {
    std::cerr << "batch_dump: " << dataset.status() << "\n";
    return 1;
  }
  const int g = absl::GetFlag(FLAGS_global_batch_size);
  // One rank with one micro-batch of G: Next() returns the global batch in position order.
  auto sampler =
      DistributedSampler::Create({(*dataset)->num_samples(Split::kTrain), g, g,
                                  /*world_size=*/1, /*rank=*/0, absl::GetFlag(FLAGS_shuffle_seed)});
  if (!sampler.ok()) {
    std::cerr << "batch_dump: " << sampler.status() << "\n";
    return 1;
  }
  const std::string out_path = absl::GetFlag(FLAGS_out);
  FILE* out = std::fopen(out_path.c_str(), "wb");
  if (out == nullptr) {
    std::perror(out_path.c_str());
    return 1;
  }
  const int64_t row = (*dataset)->seq_len() + 1;
  std::vector<int64_t> buf(row);
  for (int s = 0; s < absl::GetFlag(FLAGS_steps); ++s) {
    const std::vector<std::vector<int64_t>> micro = sampler->Next();  // One micro-batch of G.
    for (int64_t index : micro[0]) {
      (*dataset)->Copy(Split::kTrain, index, buf.data());
      if (std::fwrite(buf.data(), sizeof(int64_t), row, out) != static_cast<size_t>(row)) {
        std::perror(out_path.c_str());
        std::fclose(out);
        return 1;
      }
    }
  }
  if (std::fclose(out) != 0) {
    std::perror(out_path.c_str());
    return 1;
  }
  std::cout << "wrote " << absl::GetFlag(FLAGS_steps) << " x " << g << " x " << row << " tokens to "
            << out_path << "\n";
  return 0;
}
