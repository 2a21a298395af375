// The TCP kv store's wire format, spoken by TcpKvServer (tcp_kv_server.h) and TcpKvStore
// (tcp_kv_store.h).
//
// A frame (both directions) is a big-endian u32 field count followed by that many fields, each a
// big-endian u32 length and that many bytes.
//   ["hello", secret]                 -> ["ok"]                 first frame of every connection
//   ["set", key, value]               -> ["ok"]
//   ["get", timeout_ms, key1, ...]    -> ["ok", value1, ...] | ["timeout", missing_key, ...]
//   any request                       -> ["error", status_code, message]
//
// A reader sees every declared length before it allocates the field (FieldCheck), so a peer
// cannot make it allocate more than its caps allow.
//
// Thread safety: free functions; no shared state.
#ifndef SHARDLINE_FSDP_TCP_KV_WIRE_H_
#define SHARDLINE_FSDP_TCP_KV_WIRE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardline::fsdp::tcp_kv {

// Largest reply field and field count a client accepts: the server's caps are lower.
inline constexpr uint32_t kMaxReplyField = 64u << 20;
inline constexpr uint32_t kMaxFields = 1u << 16;
// The hello: ["hello", secret]; secrets are a few dozen bytes.
inline constexpr uint32_t kMaxHelloField = 4096;

std::string EncodeFrame(const std::vector<std::string>& fields);

// Says whether the next field, declared `length` bytes long after `fields` of a frame of `count`
// fields, may be read; an error ends the read with that error.
using FieldCheck = std::function<absl::Status(const std::vector<std::string>& fields,
                                              uint32_t count, uint32_t length)>;

// Reads one frame from `fd`. The first u32 may wait until `first_deadline` (an idle connection);
// the rest of the frame must arrive within `rest_timeout` of its start. `check` sees every
// declared length before its bytes are allocated. Errors: INVALID_ARGUMENT for more than
// kMaxFields fields; `check`'s; those of the socket reads (tcp_kv_socket.h ReadAll).
absl::StatusOr<std::vector<std::string>> ReadFrame(int fd, absl::Time first_deadline,
                                                   absl::Duration rest_timeout, int wake_fd,
                                                   const FieldCheck& check);

// The FieldCheck of a client reading a reply: clients trust the server they chose to reach,
// within a sanity bound (kMaxReplyField; UNAVAILABLE above it).
absl::Status CheckReplyField(const std::vector<std::string>& fields, uint32_t count,
                             uint32_t length);

// ["error", code, message] for `status`.
std::vector<std::string> ErrorReply(const absl::Status& status);

// The status an ["error", code, message] reply carries (UNKNOWN for any other reply).
absl::Status StatusFromReply(const std::vector<std::string>& reply);

}  // namespace shardline::fsdp::tcp_kv

#endif  // SHARDLINE_FSDP_TCP_KV_WIRE_H_
