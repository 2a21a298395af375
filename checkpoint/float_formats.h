// The 16-bit floating-point formats of checkpoints written elsewhere (PyTorch, Hugging Face),
// widened to float32 without LibTorch: IEEE 754 binary16 ("half", torch.float16) and bfloat16
// (the high 16 bits of a float32). Exact: every value of both formats is a float32.
#ifndef SHARDLINE_CHECKPOINT_FLOAT_FORMATS_H_
#define SHARDLINE_CHECKPOINT_FLOAT_FORMATS_H_

#include <cstdint>

namespace shardline::checkpoint {

float HalfToFloat(uint16_t h);
float BFloat16ToFloat(uint16_t b);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_FLOAT_FORMATS_H_
