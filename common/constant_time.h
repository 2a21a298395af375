// ConstantTimeEquals: compares secrets and tokens without an early exit on the first differing
// byte, so the time a refusal takes does not tell an attacker how much of a guess was right.
//
// Thread safety: a pure function.
#ifndef SHARDLINE_COMMON_CONSTANT_TIME_H_
#define SHARDLINE_COMMON_CONSTANT_TIME_H_

#include <algorithm>
#include <cstddef>

#include "absl/strings/string_view.h"

namespace shardline {

// True when `a` and `b` hold the same bytes. Its time depends only on the longer length.
inline bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace shardline

#endif  // SHARDLINE_COMMON_CONSTANT_TIME_H_
