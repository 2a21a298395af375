// Learning-rate schedule of the trainer: linear warmup, then cosine decay to min_lr.
//
//   step < warmup:            lr * (step + 1) / warmup
//   warmup <= step < total:   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * progress)),
//                             progress = (step - warmup) / max(1, total - warmup)
//   step >= total:            min_lr
// `step` counts optimizer steps from 0.
//
// Thread safety: pure function.
#ifndef SHARDLINE_TRAINER_LR_SCHEDULE_H_
#define SHARDLINE_TRAINER_LR_SCHEDULE_H_

namespace shardline::trainer {

double LearningRateAt(int step, double lr, double min_lr, int warmup_steps, int total_steps);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_LR_SCHEDULE_H_
