// Reads of a file mapping that survive the file being truncated underneath them.
//
// A read of a mapped page past the end of its file raises SIGBUS, which kills the process. A
// checkpoint load reads its data files through a mapping (checkpoint_reader.h MapElements: no
// staging buffers, see checkpoint/bench/results_2core.txt), and a file on a shared file system
// can shrink after it was mapped (an operator's cleanup, a retention run of another job). So
// every read of mapped checkpoint bytes runs inside GuardMappedRead: a SIGBUS at an address in
// the guarded range ends the read and the call returns false, which the reader turns into
// DATA_LOSS naming the file.
//
//   if (!GuardMappedRead(src, n, [&] { std::memcpy(dst, src, n); })) return DataLoss(...);
//
// How: a process-wide SIGBUS handler (installed on first use, chaining to the one before it)
// siglongjmps back into the GuardMappedRead frame of the faulting thread when the fault address
// lies in that thread's guarded range; any other SIGBUS gets the previous disposition (by
// default the process still dies). `read` may be abandoned at any instruction, so it must only
// read the range and write plain memory: no locks, no allocation, no LibTorch.
//
// Thread safety: any thread; each thread has its own guarded range (nesting allowed).
#ifndef SHARDLINE_CHECKPOINT_MAPPED_READ_GUARD_H_
#define SHARDLINE_CHECKPOINT_MAPPED_READ_GUARD_H_

#include <cstddef>

#include "absl/functional/function_ref.h"

namespace shardline::checkpoint {

// Runs read(), which reads [addr, addr + len) of a file mapping. Returns true when it ran to
// the end, false when it faulted with SIGBUS inside that range (the file is shorter than the
// mapping now).
bool GuardMappedRead(const void* addr, size_t len, absl::FunctionRef<void()> read);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_MAPPED_READ_GUARD_H_
