#include "fsdp/gloo_errors.h"

#include <exception>
#include <string>

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"

namespace shardline::fsdp::gloo_internal {

absl::Status StatusFromCurrentException(const std::string& prefix, absl::Duration timeout,
                                        const std::string& members) {
  try {
    throw;
  } catch (const StoreError& e) {
    return absl::Status(e.status().code(), absl::StrCat(prefix, e.status().message()));
  } catch (const gloo::IoException& e) {
    const std::string what = e.what();
    if (what.find("Timed out") != std::string::npos || what.find("timeout") != std::string::npos) {
      return absl::DeadlineExceededError(absl::StrCat(
          prefix, "timed out after ", absl::FormatDuration(timeout), " ", members, ": ", what));
    }
    return absl::UnavailableError(absl::StrCat(prefix, "lost a peer ", members, ": ", what));
  } catch (const gloo::EnforceNotMet& e) {
    // Gloo reports broken pairs (a peer that died while connecting or mid-operation) through
    // its enforce checks as well as through IoException.
    return absl::UnavailableError(absl::StrCat(prefix, "gloo failed ", members, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(prefix, e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(prefix, "unknown exception"));
  }
}

}  // namespace shardline::fsdp::gloo_internal
