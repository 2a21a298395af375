// TcpKvServer's defences against clients that are not ranks of this job: the shared-secret hello,
// the caps on connections, keys and bytes (checked before allocating), reaping of finished
// connections, and the accept loop's back-off when the process runs out of descriptors. The
// behaviour every KvStore shares is in kv_store_test.cc.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fsdp/tcp_kv_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

using ::testing::HasSubstr;

// ---- A raw client that speaks the wire format by hand, to send what TcpKvStore never would.

void PutU32(std::string* out, uint32_t v) {
  const uint32_t be = htonl(v);
  out->append(reinterpret_cast<const char*>(&be), 4);
}

std::string Frame(const std::vector<std::string>& fields) {
  std::string out;
  PutU32(&out, fields.size());
  for (const std::string& f : fields) {
    PutU32(&out, f.size());
    out.append(f);
  }
  return out;
}

// A blocking loopback connection to `port`; -1 on failure.
int RawConnect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{5, 0};  // No test waits on a reply longer than this.
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += n;
  }
  return true;
}

bool RecvAll(int fd, char* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = recv(fd, out + done, size - done, 0);
    if (n <= 0) return false;
    done += n;
  }
  return true;
}

bool RecvU32(int fd, uint32_t* v) {
  if (!RecvAll(fd, reinterpret_cast<char*>(v), 4)) return false;
  *v = ntohl(*v);
  return true;
}

// Reads one reply frame (small fields only); empty on EOF or error.
std::vector<std::string> RecvFrame(int fd) {
  uint32_t count = 0;
  if (!RecvU32(fd, &count) || count > 16) return {};
  std::vector<std::string> fields;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    if (!RecvU32(fd, &len) || len > 4096) return {};
    std::string f(len, '\0');
    if (!RecvAll(fd, f.data(), len)) return {};
    fields.push_back(std::move(f));
  }
  return fields;
}

// True when the server closed the connection (EOF or reset) within the receive timeout.
bool ClosedByServer(int fd) {
  char byte;
  ssize_t n = recv(fd, &byte, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

std::string Code(absl::StatusCode code) { return absl::StrCat(static_cast<int>(code)); }

std::unique_ptr<TcpKvServer> Serve(TcpKvServer::Options options) {
  auto server = TcpKvServer::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<TcpKvStore> Client(int port, const std::string& secret) {
  TcpKvStore::Options options;
  options.port = port;
  options.secret = secret;
  options.connect_timeout = absl::Seconds(5);
  auto store = TcpKvStore::Create(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

int CountEntries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - (std::string(dir) == "/proc/self/fd" ? 1 : 0);  // opendir's own fd.
}

// ---- The hello ---------------------------------------------------------------------------------

TEST(TcpKvServer, ClientWithTheSecretIsServed) {
  auto server = Serve({.secret = "s3cret"});
  auto client = Client(server->port(), "s3cret");
  ASSERT_TRUE(client->Set("k", "v").ok());
  auto values = client->Get({"k"}, absl::Seconds(1));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0], "v");
}

TEST(TcpKvServer, WrongSecretIsPermissionDenied) {
  auto server = Serve({.secret = "s3cret"});
  for (const std::string wrong : {"", "s3cre", "s3cret!", "S3CRET"}) {
    auto client = Client(server->port(), wrong);
    absl::Status s = client->Set("k", "v");
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("wrong store secret")) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("SHARDLINE_STORE_SECRET")) << s;
  }
  // Nothing a refused client sent was stored.
  auto good = Client(server->port(), "s3cret");
  auto missing = good->Get({"k"}, absl::Milliseconds(10));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded) << missing.status();
}

TEST(TcpKvServer, RequestBeforeHelloIsRefusedAndClosed) {
  auto server = Serve({.secret = "s3cret"});
  int fd = RawConnect(server->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Frame({"set", "k", "v"})));
  std::vector<std::string> reply = RecvFrame(fd);
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(reply[0], "error");
  EXPECT_EQ(reply[1], Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(reply[2], HasSubstr("hello"));
  EXPECT_TRUE(ClosedByServer(fd));
  close(fd);
}

TEST(TcpKvServer, SilentConnectionIsClosedAfterHandshakeTimeout) {
  auto server = Serve({.handshake_timeout = absl::Milliseconds(200)});
  int fd = RawConnect(server->port());
  ASSERT_GE(fd, 0);
  const absl::Time start = absl::Now();
  std::vector<std::string> reply = RecvFrame(fd);
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(reply[1], Code(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(reply[2], HasSubstr("no hello within"));
  EXPECT_TRUE(ClosedByServer(fd));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  close(fd);
}

// ---- Caps --------------------------------------------------------------------------------------

// The peak resident set of this process, in bytes.
int64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

TEST(TcpKvServer, DeclaredGiantValueIsRefusedBeforeAllocation) {
  auto server = Serve({});
  int fd = RawConnect(server->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Frame({"hello", ""})));
  ASSERT_EQ(RecvFrame(fd), std::vector<std::string>{"ok"});
  const int64_t rss_before = PeakRssBytes();
  // ["set", "k", <1 GiB>]: the header of the value and then nothing.
  std::string header;
  PutU32(&header, 3);
  PutU32(&header, 3);
  header += "set";
  PutU32(&header, 1);
  header += "k";
  PutU32(&header, 1u << 30);
  ASSERT_TRUE(SendAll(fd, header));
  std::vector<std::string> reply = RecvFrame(fd);
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(reply[1], Code(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(reply[2], HasSubstr("value of 1073741824 bytes; limit max_value_bytes=1048576"));
  EXPECT_TRUE(ClosedByServer(fd));
  close(fd);
  // Allocating (and zero-filling) the declared 1 GiB would have raised the peak by 1 GiB.
  EXPECT_LT(PeakRssBytes() - rss_before, 64 << 20);
}

TEST(TcpKvServer, DeclaredGiantHelloIsRefused) {
  auto server = Serve({});
  int fd = RawConnect(server->port());
  ASSERT_GE(fd, 0);
  std::string header;
  PutU32(&header, 2);
  PutU32(&header, 5);
  header += "hello";
  PutU32(&header, 1u << 30);
  ASSERT_TRUE(SendAll(fd, header));
  std::vector<std::string> reply = RecvFrame(fd);
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(reply[1], Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(reply[2], HasSubstr("hello field of 1073741824 bytes"));
  EXPECT_TRUE(ClosedByServer(fd));
  close(fd);
}

TEST(TcpKvServer, ValueOverCapIsResourceExhaustedAndClientRecovers) {
  auto server = Serve({.max_value_bytes = 1000});
  auto client = Client(server->port(), "");
  absl::Status s = client->Set("big", std::string(4 << 20, 'x'));  // Sent while refused.
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("limit max_value_bytes=1000")) << s;
  s = client->Set("small", std::string(1000, 'x'));
  EXPECT_TRUE(s.ok()) << s;
}

TEST(TcpKvServer, KeyOverCapIsResourceExhausted) {
  auto server = Serve({.max_key_bytes = 10});
  auto client = Client(server->port(), "");
  absl::Status s = client->Set(std::string(11, 'k'), "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("key of 11 bytes; limit max_key_bytes=10"));
  auto values = client->Get({std::string(11, 'k')}, absl::Milliseconds(1));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kResourceExhausted) << values.status();
}

TEST(TcpKvServer, KeyCountCapRefusesNewKeysButNotReplacements) {
  auto server = Serve({.max_keys = 3});
  auto client = Client(server->port(), "");
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(client->Set(k, "v").ok());
  absl::Status s = client->Set("d", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("holds 3 keys; limit max_keys=3")) << s;
  EXPECT_TRUE(client->Set("a", "replaced").ok());
}

TEST(TcpKvServer, TotalBytesCapCountsReplacedValuesOnce) {
  auto server = Serve({.max_total_bytes = 100});
  auto client = Client(server->port(), "");
  ASSERT_TRUE(client->Set("a", std::string(59, 'x')).ok());  // 60 bytes held.
  absl::Status s = client->Set("b", std::string(59, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("hold 120 bytes; limit max_total_bytes=100"));
  EXPECT_TRUE(client->Set("a", std::string(99, 'x')).ok()) << "replacing frees the old value";
}

// One get naming a 1 MiB value's key 2 times (or many) would make the server copy it per name.
TEST(TcpKvServer, RepeatedKeysAndLargeRepliesAreRefusedAndTheClientRecovers) {
  auto server = Serve({.max_reply_bytes = 2 << 20});
  auto client = Client(server->port(), "");
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(client->Set(k, std::string(1 << 20, 'x')).ok());
  auto values = client->Get({"a", "b", "a"}, absl::Milliseconds(1));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument) << values.status();
  EXPECT_THAT(std::string(values.status().message()), HasSubstr("get names key a more than once"));
  values = client->Get({"a", "b", "c"}, absl::Milliseconds(1));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kResourceExhausted) << values.status();
  EXPECT_THAT(std::string(values.status().message()),
              HasSubstr("add up to 3145728 bytes; limit max_reply_bytes=2097152"));
  values = client->Get({"a", "b"}, absl::Milliseconds(1));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[1].size(), size_t{1} << 20);
}

TEST(TcpKvServer, ConnectionCapRefusesOneMoreUntilOneCloses) {
  auto server = Serve({.max_connections = 3});
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    int fd = RawConnect(server->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, Frame({"hello", ""})));
    ASSERT_EQ(RecvFrame(fd), std::vector<std::string>{"ok"});
    held.push_back(fd);
  }
  auto client = Client(server->port(), "");
  absl::Status s = client->Set("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("limit max_connections=3")) << s;
  close(held.back());
  held.pop_back();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (server->connection_count() > 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  s = client->Set("k", "v");
  EXPECT_TRUE(s.ok()) << s;
  for (int fd : held) close(fd);
}

// ---- Finished connections ----------------------------------------------------------------------

TEST(TcpKvServer, ConnectCloseCyclesLeaveThreadsAndFdsBounded) {
  auto server = Serve({.secret = "s"});
  {
    auto warm = Client(server->port(), "s");  // Any lazily created state exists from here.
    ASSERT_TRUE(warm->Set("warm", "v").ok());
  }
  absl::SleepFor(absl::Milliseconds(100));
  const int threads_before = CountEntries("/proc/self/task");
  const int fds_before = CountEntries("/proc/self/fd");
  for (int i = 0; i < 10000; ++i) {
    if (i % 2 == 0) {
      int fd = RawConnect(server->port());  // Connects and leaves without a hello.
      ASSERT_GE(fd, 0) << "cycle " << i;
      close(fd);
    } else {
      auto client = Client(server->port(), "s");
      ASSERT_TRUE(client->Set("k", absl::StrCat(i)).ok()) << "cycle " << i;
    }
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (server->connection_count() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(server->connection_count(), 0);
  EXPECT_LE(CountEntries("/proc/self/task"), threads_before);
  EXPECT_LE(CountEntries("/proc/self/fd"), fds_before);
}

// ---- Out of descriptors ------------------------------------------------------------------------

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Runs in a child process (its RLIMIT_NOFILE is lowered). Returns 0 on success, else the step
// that failed.
int AcceptWithoutDescriptorsChild() {
  auto created = TcpKvServer::Create({});
  if (!created.ok()) return 10;
  std::unique_ptr<TcpKvServer> server = std::move(*created);
  int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (client < 0) return 11;
  // Every descriptor below the lowest free one is in use: a limit there leaves none to accept.
  const int lowest_free = dup(0);
  close(lowest_free);
  rlimit old_limit{};
  getrlimit(RLIMIT_NOFILE, &old_limit);
  rlimit low = old_limit;
  low.rlim_cur = lowest_free;
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) return 12;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 13;
  // The connection waits in the backlog; accept4 fails with EMFILE each time it tries.
  const double cpu_before = ProcessCpuSeconds();
  absl::SleepFor(absl::Seconds(1));
  const double cpu_used = ProcessCpuSeconds() - cpu_before;
  if (cpu_used > 0.2) {
    fprintf(stderr, "accept loop used %.3f s of CPU in 1 s without descriptors\n", cpu_used);
    return 14;
  }
  // Descriptors come back: the waiting client is accepted and served.
  if (setrlimit(RLIMIT_NOFILE, &old_limit) != 0) return 15;
  timeval tv{5, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (!SendAll(client, Frame({"hello", ""}))) return 16;
  if (RecvFrame(client) != std::vector<std::string>{"ok"}) return 17;
  close(client);
  return 0;
}

TEST(TcpKvServer, OutOfDescriptorsAcceptBacksOffWithoutSpinning) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(AcceptWithoutDescriptorsChild());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child failed at step " << WEXITSTATUS(status);
}

}  // namespace
}  // namespace shardline::fsdp
