// How a user-written value appears in a message: long ones are cut, so a megabyte-long field
// does not come back as a megabyte-long error. Shared by the spec checks.
#ifndef SHARDLINE_SPEC_SHOWN_H_
#define SHARDLINE_SPEC_SHOWN_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace shardline::spec {

inline std::string Shown(const std::string& value) {
  constexpr size_t kMax = 512;
  if (value.size() <= kMax) return value;
  return absl::StrCat(value.substr(0, kMax), "... (", value.size(), " bytes)");
}

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_SHOWN_H_
