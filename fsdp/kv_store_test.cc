// Behaviour shared by every KvStore implementation, run against each of them, plus the parts
// specific to one (prefixing, TCP connect failure).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fsdp/file_kv_store.h"
#include "fsdp/kv_store.h"
#include "fsdp/prefix_kv_store.h"
#include "fsdp/tcp_kv_store.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(base ? base : "/tmp", "/kvXXXXXX");
  char* dir = mkdtemp(templ.data());
  EXPECT_NE(dir, nullptr);
  return templ;
}

// A factory of "clients": each call returns another handle onto the same store, as another
// rank would hold.
class StoreFixture {
 public:
  virtual ~StoreFixture() = default;
  virtual std::unique_ptr<KvStore> NewClient() = 0;
};

class FileFixture : public StoreFixture {
 public:
  FileFixture() : dir_(MakeTempDir()) {}
  std::unique_ptr<KvStore> NewClient() override {
    auto store = FileKvStore::Create({dir_});
    EXPECT_TRUE(store.ok()) << store.status();
    return std::move(*store);
  }

 private:
  std::string dir_;
};

class TcpFixture : public StoreFixture {
 public:
  TcpFixture() {
    TcpKvStore::Options options;
    options.serve = true;
    auto server = TcpKvStore::Create(options);
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::unique_ptr<KvStore> NewClient() override {
    TcpKvStore::Options options;
    options.port = server_->port();
    auto store = TcpKvStore::Create(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return std::move(*store);
  }

 private:
  std::unique_ptr<TcpKvStore> server_;
};

// Prefix views onto a TCP store: keys set through one prefix are seen through the same prefix.
class PrefixFixture : public StoreFixture {
 public:
  std::unique_ptr<KvStore> NewClient() override {
    bases_.push_back(inner_.NewClient());
    return std::make_unique<PrefixKvStore>(bases_.back().get(), "group/shard[0]");
  }

 private:
  TcpFixture inner_;
  std::vector<std::unique_ptr<KvStore>> bases_;
};

using FixtureFactory = std::function<std::unique_ptr<StoreFixture>()>;

class KvStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "file") fixture_ = std::make_unique<FileFixture>();
    if (GetParam() == "tcp") fixture_ = std::make_unique<TcpFixture>();
    if (GetParam() == "prefix") fixture_ = std::make_unique<PrefixFixture>();
    ASSERT_NE(fixture_, nullptr);
  }
  std::unique_ptr<StoreFixture> fixture_;
};

TEST_P(KvStoreTest, SetThenGetFromAnotherClient) {
  auto a = fixture_->NewClient();
  auto b = fixture_->NewClient();
  const std::string binary("\0\x01\xff/..%", 7);
  ASSERT_TRUE(a->Set("rank/0", "addr-0").ok());
  ASSERT_TRUE(a->Set("weird key/../x", binary).ok());
  auto values = b->Get({"rank/0", "weird key/../x"}, absl::Seconds(5));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"addr-0", binary}));
}

TEST_P(KvStoreTest, SetReplacesValue) {
  auto a = fixture_->NewClient();
  ASSERT_TRUE(a->Set("k", "one").ok());
  ASSERT_TRUE(a->Set("k", "two").ok());
  auto values = a->Get({"k"}, absl::Seconds(5));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0], "two");
}

TEST_P(KvStoreTest, GetWaitsForKeySetLater) {
  auto a = fixture_->NewClient();
  auto b = fixture_->NewClient();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_TRUE(a->Set("late", "value").ok());
  });
  const absl::Time start = absl::Now();
  auto values = b->Get({"late"}, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0], "value");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
}

TEST_P(KvStoreTest, GetTimesOutNamingMissingKeys) {
  auto a = fixture_->NewClient();
  ASSERT_TRUE(a->Set("present", "x").ok());
  const absl::Time start = absl::Now();
  auto values = a->Get({"present", "missing-1", "missing-2"}, absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded) << values.status();
  const std::string message(values.status().message());
  EXPECT_NE(message.find("missing-1"), std::string::npos) << message;
  EXPECT_NE(message.find("missing-2"), std::string::npos) << message;
  EXPECT_EQ(message.find("present"), std::string::npos) << message;
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(5));
}

// Every "rank" thread publishes its key and then waits for all others: the pattern of a
// rendezvous, with several threads sharing one client and several clients.
TEST_P(KvStoreTest, ManyThreadsRendezvous) {
  constexpr int kRanks = 8;
  auto shared = fixture_->NewClient();
  std::vector<std::unique_ptr<KvStore>> own;
  for (int r = 0; r < kRanks / 2; ++r) own.push_back(fixture_->NewClient());
  std::vector<std::string> keys;
  for (int r = 0; r < kRanks; ++r) keys.push_back(absl::StrCat("rank", r));
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      KvStore* store = r % 2 == 0 ? shared.get() : own[r / 2].get();
      absl::SleepFor(absl::Milliseconds(10 * r));
      absl::Status s = store->Set(keys[r], absl::StrCat("value", r));
      if (!s.ok()) {
        results[r] = s;
        return;
      }
      auto values = store->Get(keys, absl::Seconds(20));
      if (!values.ok()) {
        results[r] = values.status();
        return;
      }
      for (int i = 0; i < kRanks; ++i) {
        if ((*values)[i] != absl::StrCat("value", i)) {
          results[r] = absl::InternalError(absl::StrCat("rank ", r, " saw ", (*values)[i]));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(results[r].ok()) << results[r];
}

INSTANTIATE_TEST_SUITE_P(AllStores, KvStoreTest, ::testing::Values("file", "tcp", "prefix"),
                         [](const auto& info) { return info.param; });

TEST(PrefixKvStore, PrefixesSeparateNamespaces) {
  TcpFixture fixture;
  auto base = fixture.NewClient();
  PrefixKvStore shard0(base.get(), "shard[0]");
  PrefixKvStore shard1(base.get(), "shard[1]");
  ASSERT_TRUE(shard0.Set("rank0", "a").ok());
  ASSERT_TRUE(shard1.Set("rank0", "b").ok());
  auto v0 = shard0.Get({"rank0"}, absl::Seconds(1));
  auto v1 = shard1.Get({"rank0"}, absl::Seconds(1));
  ASSERT_TRUE(v0.ok() && v1.ok());
  EXPECT_EQ((*v0)[0], "a");
  EXPECT_EQ((*v1)[0], "b");
  auto raw = base->Get({"shard[1]/rank0"}, absl::Seconds(1));
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ((*raw)[0], "b");
  auto missing = shard1.Get({"rank1"}, absl::Milliseconds(50));
  ASSERT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("shard[1]/rank1"), std::string::npos)
      << missing.status();
}

TEST(TcpKvStore, UnreachableServerIsUnavailableAfterConnectTimeout) {
  // A port bound but not listening, held for the whole test: connects are refused, and no other
  // process (tests run in parallel) can take it meanwhile, as one did once with a port learned
  // from a server that was then shut down.
  const int held = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{held};
  TcpKvStore::Options options;
  options.port = port;
  options.connect_timeout = absl::Milliseconds(300);
  auto store = TcpKvStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::Status s = (*store)->Set("k", "v");
  ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(absl::StrCat("127.0.0.1:", port)), std::string::npos) << s;
}

TEST(TcpKvStore, ClientStartedBeforeServerConnectsWhenItComesUp) {
  auto probe = TcpKvServer::Create({});
  ASSERT_TRUE(probe.ok());
  const int port = (*probe)->port();
  probe->reset();
  TcpKvStore::Options options;
  options.port = port;
  options.connect_timeout = absl::Seconds(20);
  auto client = TcpKvStore::Create(options);
  ASSERT_TRUE(client.ok());
  std::unique_ptr<TcpKvServer> late;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    auto server = TcpKvServer::Create({"127.0.0.1", port});
    ASSERT_TRUE(server.ok()) << server.status();
    late = std::move(*server);
  });
  absl::Status s = (*client)->Set("k", "v");
  starter.join();
  EXPECT_TRUE(s.ok()) << s;
}

// A serving store on a free port and a client connected to it.
void ServeAndConnect(std::unique_ptr<TcpKvStore>* server, std::unique_ptr<TcpKvStore>* client) {
  TcpKvStore::Options options;
  options.serve = true;
  auto s = TcpKvStore::Create(options);
  ASSERT_TRUE(s.ok()) << s.status();
  options.serve = false;
  options.port = (*s)->port();
  auto c = TcpKvStore::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  *server = *std::move(s);
  *client = *std::move(c);
}

TEST(TcpKvStore, ServerShutdownFailsBlockedGetWithUnavailable) {
  std::unique_ptr<TcpKvStore> server, client;
  ASSERT_NO_FATAL_FAILURE(ServeAndConnect(&server, &client));
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    server.reset();
  });
  auto values = client->Get({"never"}, absl::Seconds(30));
  killer.join();
  EXPECT_EQ(values.status().code(), absl::StatusCode::kUnavailable) << values.status();
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Regression: an infinite wait once became poll(timeout 0) (milliseconds + 1 overflowed), so the
// server's accept thread and each idle connection thread spun at 100% of a core for the whole
// run of every rank-0 trainer. Idle for 2 s, they must use (almost) no CPU; spinning used
// seconds, and even on a machine loaded 8x over still hundreds of milliseconds.
TEST(TcpKvStore, IdleServerAndConnectionDoNotSpin) {
  std::unique_ptr<TcpKvStore> server, client;
  ASSERT_NO_FATAL_FAILURE(ServeAndConnect(&server, &client));
  ASSERT_TRUE(client->Set("k", "v").ok());  // The connection is open and idle from here.
  const double before = ProcessCpuSeconds();
  absl::SleepFor(absl::Seconds(2));
  const double used = ProcessCpuSeconds() - before;
  EXPECT_LT(used, 0.05) << "idle store threads used " << used << " s of CPU in 2 s";
}

TEST(FileKvStore, RejectsEmptyDirectory) {
  auto store = FileKvStore::Create({""});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardline::fsdp
