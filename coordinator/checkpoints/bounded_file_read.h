// ReadRegularFileBounded: reads a small regular file on a helper thread and waits for it at most
// a timeout, so a gRPC thread never blocks on the file system. GetCheckpoint reads MANIFEST.json
// at a path a trainer reported: a FIFO there would block open(2) forever, a device could stream
// without end, and a hung network mount could stall read(2).
//
// The file is opened with O_NONBLOCK (a FIFO without writer does not block the open) and refused
// unless fstat says it is a regular file. A read still running at the timeout is left to its
// detached thread, which owns everything it touches.
//
// Thread safety: a pure function; may be called from any thread.
#ifndef SHARDLINE_COORDINATOR_CHECKPOINTS_BOUNDED_FILE_READ_H_
#define SHARDLINE_COORDINATOR_CHECKPOINTS_BOUNDED_FILE_READ_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardline::coordinator {

// Errors: NOT_FOUND for a missing path; FAILED_PRECONDITION "<path> is not a regular file (...)"
// for a FIFO, device, socket or directory; OUT_OF_RANGE for a file over `max_bytes`;
// DEADLINE_EXCEEDED naming the path and the timeout; UNAVAILABLE for other I/O errors.
absl::StatusOr<std::string> ReadRegularFileBounded(const std::string& path, absl::Duration timeout,
                                                   int64_t max_bytes);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CHECKPOINTS_BOUNDED_FILE_READ_H_
