#include "common/torch_status.h"

#include <new>
#include <string>

#include "absl/strings/str_cat.h"

namespace shardline {

StatusException::StatusException(absl::Status status)
    : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusException(status);
}

absl::Status StatusFromCurrentTorchException(absl::string_view what) {
  try {
    throw;
  } catch (const StatusException& e) {
    return e.status();  // Ours, thrown through LibTorch: the original status.
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const c10::ValueError& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const c10::TypeError& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const c10::IndexError& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::UnknownError(absl::StrCat(what, ": unknown exception"));
  }
}

}  // namespace shardline
