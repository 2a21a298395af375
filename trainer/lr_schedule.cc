#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace shardline::trainer {

double LearningRateAt(int step, double lr, double min_lr, int warmup_steps, int total_steps) {
  if (step < warmup_steps) return lr * (step + 1) / warmup_steps;
  if (step >= total_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / std::max(1, total_steps - warmup_steps);
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace shardline::trainer
