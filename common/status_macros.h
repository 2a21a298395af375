// Status propagation macros, shaped like Abseil's later ABSL_RETURN_IF_ERROR / ASSIGN_OR_RETURN
// (Debian's Abseil 20220623 predates them).
//
//   RETURN_IF_ERROR(DoThing());                      // returns the status if not OK
//   ASSIGN_OR_RETURN(auto value, ComputeValue());    // unwraps a StatusOr or returns its status
//
// Thread safety: macros only; no state.
#ifndef SHARDLINE_COMMON_STATUS_MACROS_H_
#define SHARDLINE_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SL_STATUS_CONCAT_INNER_(a, b) a##b
#define SL_STATUS_CONCAT_(a, b) SL_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    const ::absl::Status sl_status_ = (expr); \
    if (!sl_status_.ok()) return sl_status_;  \
  } while (0)

#define SL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  SL_ASSIGN_OR_RETURN_IMPL_(SL_STATUS_CONCAT_(sl_statusor_, __LINE__), lhs, expr)

#endif  // SHARDLINE_COMMON_STATUS_MACROS_H_
