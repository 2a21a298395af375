// The one adapter that turns LibTorch exceptions into absl::Status. LibTorch reports errors by
// throwing c10::Error (and sometimes std::exception); nothing may throw across a module edge
// here, so every call into LibTorch that can fail goes through TorchCall / TorchTry.
//
//   RETURN_IF_ERROR(TorchCall("load model", [&] { module = torch::jit::load(path); }));
//   ASSIGN_OR_RETURN(at::Tensor t, TorchTry("gather", [&] { return torch::cat(parts); }));
//
// The status is INTERNAL for c10::Error (a LibTorch invariant broke, usually a shape or dtype
// mistake), INVALID_ARGUMENT for c10::ValueError/TypeError/IndexError, RESOURCE_EXHAUSTED for
// out-of-memory, and the message is "<what>: <LibTorch's message without its C++ backtrace>".
//
// The other direction: code called from inside LibTorch that cannot return a status (autograd
// hooks, a model forward's fsdp::RunUnit, a callback of models::Generate) throws
// StatusException (ThrowIfError), and the adapter gives back exactly that status, code and
// message unchanged: a collective that lost a peer inside the FSDP engine's backward hook stays
// UNAVAILABLE naming its group, wherever the TorchTry around it sits. This is the only exception
// that crosses module edges, and only inside LibTorch calls wrapped by this adapter.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_COMMON_TORCH_STATUS_H_
#define SHARDLINE_COMMON_TORCH_STATUS_H_

#include <exception>
#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "c10/util/Exception.h"

namespace shardline {

// An absl::Status thrown through LibTorch. what() is the status message.
class StatusException : public std::runtime_error {
 public:
  explicit StatusException(absl::Status status);
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Throws StatusException(status) unless status is OK. For code LibTorch calls that has no other
// way to fail; the TorchTry / TorchCall around the LibTorch call returns the status again.
void ThrowIfError(const absl::Status& status);

// Converts the exception currently being handled. Call only inside a catch block. A
// StatusException gives back its status unchanged (`what` is not prepended).
absl::Status StatusFromCurrentTorchException(absl::string_view what);

// Runs `fn` (returning void) and converts any exception it throws.
template <typename Fn>
absl::Status TorchCall(absl::string_view what, Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
    return absl::OkStatus();
  } catch (...) {
    return StatusFromCurrentTorchException(what);
  }
}

// Runs `fn` (returning a value) and converts any exception it throws.
template <typename Fn>
auto TorchTry(absl::string_view what, Fn&& fn) -> absl::StatusOr<decltype(fn())> {
  try {
    return std::forward<Fn>(fn)();
  } catch (...) {
    return StatusFromCurrentTorchException(what);
  }
}

}  // namespace shardline

#endif  // SHARDLINE_COMMON_TORCH_STATUS_H_
