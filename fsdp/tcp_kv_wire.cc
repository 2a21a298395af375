#include "fsdp/tcp_kv_wire.h"

#include <arpa/inet.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "fsdp/tcp_kv_socket.h"

namespace shardline::fsdp::tcp_kv {
namespace {

void PutU32(std::string* out, uint32_t v) {
  const uint32_t be = htonl(v);
  out->append(reinterpret_cast<const char*>(&be), 4);
}

absl::StatusOr<uint32_t> ReadU32(int fd, absl::Time deadline, int wake_fd) {
  uint32_t be;
  absl::Status s = ReadAll(fd, reinterpret_cast<char*>(&be), 4, deadline, wake_fd);
  if (!s.ok()) return s;
  return ntohl(be);
}

}  // namespace

std::string EncodeFrame(const std::vector<std::string>& fields) {
  std::string out;
  PutU32(&out, fields.size());
  for (const std::string& f : fields) {
    PutU32(&out, f.size());
    out.append(f);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadFrame(int fd, absl::Time first_deadline,
                                                   absl::Duration rest_timeout, int wake_fd,
                                                   const FieldCheck& check) {
  absl::StatusOr<uint32_t> count = ReadU32(fd, first_deadline, wake_fd);
  if (!count.ok()) return count.status();
  const absl::Time deadline = absl::Now() + rest_timeout;
  if (*count > kMaxFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv frame of ", *count, " fields; limit ", kMaxFields));
  }
  std::vector<std::string> fields;
  while (fields.size() < *count) {
    absl::StatusOr<uint32_t> len = ReadU32(fd, deadline, wake_fd);
    if (!len.ok()) return len.status();
    absl::Status allowed = check(fields, *count, *len);
    if (!allowed.ok()) return allowed;
    std::string f(*len, '\0');
    absl::Status s = ReadAll(fd, f.data(), *len, deadline, wake_fd);
    if (!s.ok()) return s;
    fields.push_back(std::move(f));
  }
  return fields;
}

absl::Status CheckReplyField(const std::vector<std::string>&, uint32_t, uint32_t length) {
  if (length > kMaxReplyField) return absl::UnavailableError("kv frame: field too large");
  return absl::OkStatus();
}

std::vector<std::string> ErrorReply(const absl::Status& status) {
  return {"error", absl::StrCat(static_cast<int>(status.code())), std::string(status.message())};
}

absl::Status StatusFromReply(const std::vector<std::string>& reply) {
  int code = 0;
  if (reply.size() == 3 && reply[0] == "error" && absl::SimpleAtoi(reply[1], &code) && code > 0 &&
      code <= static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::Status(static_cast<absl::StatusCode>(code), reply[2]);
  }
  return absl::UnknownError(absl::StrCat("unexpected reply: ", absl::StrJoin(reply, " ")));
}

}  // namespace shardline::fsdp::tcp_kv
