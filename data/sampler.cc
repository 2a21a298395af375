#include "data/sampler.h"

#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace shardline::data {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, bound) without modulo bias. std::uniform_int_distribution is not specified
// exactly by the standard, so it could differ between standard libraries; this cannot.
uint64_t Bounded(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

}  // namespace

absl::StatusOr<DistributedSampler> DistributedSampler::Create(const Options& o) {
  if (o.world_size <= 0 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is not in [0, world_size ", o.world_size, ")"));
  }
  if (o.micro_batch_size <= 0 || o.global_batch_size <= 0 ||
      o.global_batch_size % (static_cast<int64_t>(o.micro_batch_size) * o.world_size) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.global_batch_size: ", o.global_batch_size,
                     " is not divisible by micro_batch_size * world_size = ", o.micro_batch_size,
                     " * ", o.world_size));
  }
  if (o.num_samples < o.global_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: ", o.num_samples, " training sequences are fewer than one global batch of ",
        o.global_batch_size, "; use more data, a shorter data.seq_len or a smaller batch"));
  }
  return DistributedSampler(o);
}

DistributedSampler::DistributedSampler(const Options& options)
    : options_(options),
      accumulation_steps_(options.global_batch_size /
                          (options.micro_batch_size * options.world_size)) {}

DataCursor DistributedSampler::CursorAfterSteps(int64_t steps) const {
  const int64_t per_epoch = steps_per_epoch();
  return {steps / per_epoch, (steps % per_epoch) * options_.global_batch_size};
}

std::vector<int64_t> DistributedSampler::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> order(options_.num_samples);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(SplitMix64(options_.seed ^ SplitMix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = options_.num_samples - 1; i > 0; --i) {  // Fisher-Yates.
    std::swap(order[i], order[Bounded(rng, static_cast<uint64_t>(i) + 1)]);
  }
  return order;
}

std::vector<std::vector<int64_t>> DistributedSampler::Next() {
  if (order_epoch_ != cursor_.epoch) {
    order_ = EpochOrder(cursor_.epoch);
    order_epoch_ = cursor_.epoch;
  }
  const int64_t b = options_.micro_batch_size, w = options_.world_size;
  std::vector<std::vector<int64_t>> micro(accumulation_steps_);
  for (int m = 0; m < accumulation_steps_; ++m) {
    const int64_t start = cursor_.position + m * w * b + options_.rank * b;
    micro[m].assign(order_.begin() + start, order_.begin() + start + b);
  }
  cursor_.position += options_.global_batch_size;
  if (cursor_.position + options_.global_batch_size > options_.num_samples) {
    cursor_.epoch += 1;
    cursor_.position = 0;
  }
  return micro;
}

absl::Status DistributedSampler::Restore(const DataCursor& c) {
  const int64_t g = options_.global_batch_size;
  if (c.epoch < 0 || c.position < 0 || c.position % g != 0 ||
      c.position + g > options_.num_samples) {
    return absl::InvalidArgumentError(
        absl::StrCat("data cursor (epoch ", c.epoch, ", position ", c.position,
                     ") does not fit this data: position must be a multiple of global_batch_size ",
                     g, " with a full batch left among ", options_.num_samples, " sequences"));
  }
  cursor_ = c;
  return absl::OkStatus();
}

std::vector<int64_t> ValidationIndices(int64_t batch, int micro_batch_size, int world_size,
                                       int rank, int64_t num_val_samples) {
  std::vector<int64_t> out(micro_batch_size);
  const int64_t first = (batch * world_size + rank) * micro_batch_size;
  for (int k = 0; k < micro_batch_size; ++k) out[k] = (first + k) % num_val_samples;
  return out;
}

}  // namespace shardline::data
