#include "coordinator/rendezvous/rendezvous_store.h"

#include <thread>

#include "common/constant_time.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

TEST(RendezvousStore, SetThenGetInKeyOrder) {
  RendezvousStore store;
  store.Open("job-1/1", "s3cret");
  ASSERT_TRUE(store.Set("job-1/1", "s3cret", "a", "1").ok());
  ASSERT_TRUE(store.Set("job-1/1", "s3cret", "b", std::string("\0x", 2)).ok());
  auto v = store.Get("job-1/1", "s3cret", {"b", "a"}, absl::ZeroDuration());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<std::string>{std::string("\0x", 2), "1"}));
}

TEST(RendezvousStore, WrongSecretIsPermissionDenied) {
  RendezvousStore store;
  store.Open("job-1/1", "s3cret");
  ASSERT_TRUE(store.Set("job-1/1", "s3cret", "a", "1").ok());
  absl::Status set = store.Set("job-1/1", "guess", "a", "evil");
  EXPECT_EQ(set.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(set.message().find("wrong secret"), std::string::npos);
  auto get = store.Get("job-1/1", "", {"a"}, absl::ZeroDuration());
  EXPECT_EQ(get.status().code(), absl::StatusCode::kPermissionDenied);
  // The value is unchanged by the refused write.
  EXPECT_EQ((*store.Get("job-1/1", "s3cret", {"a"}, absl::ZeroDuration()))[0], "1");
  // Another attempt's secret does not open this one.
  store.Open("job-1/2", "other");
  EXPECT_EQ(store.Get("job-1/1", "other", {"a"}, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(RendezvousStore, UnknownNamespaceIsNotFound) {
  RendezvousStore store;
  EXPECT_EQ(store.Set("nope/1", "x", "a", "1").code(), absl::StatusCode::kNotFound);
}

TEST(RendezvousStore, GetTimesOutNamingMissingKeys) {
  RendezvousStore store;
  store.Open("ns", "s");
  ASSERT_TRUE(store.Set("ns", "s", "have", "1").ok());
  const absl::Time start = absl::Now();
  auto v = store.Get("ns", "s", {"have", "missing0", "missing1"}, absl::Milliseconds(200));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("[missing0, missing1]"), std::string::npos) << v.status();
  EXPECT_GE(waited, absl::Milliseconds(190));
  EXPECT_LT(waited, absl::Seconds(5));
}

TEST(RendezvousStore, GetWaitsForAKeySetByAnotherThread) {
  RendezvousStore store;
  store.Open("ns", "s");
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(store.Set("ns", "s", "late", "v").ok());
  });
  auto v = store.Get("ns", "s", {"late"}, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0], "v");
}

TEST(RendezvousStore, CloseWakesWaitersWithAborted) {
  RendezvousStore store;
  store.Open("ns", "s");
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    store.Close("ns");
  });
  auto v = store.Get("ns", "s", {"never"}, absl::Seconds(10));
  closer.join();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store.namespace_count(), 0u);
}

TEST(RendezvousStore, LimitsAreResourceExhausted) {
  RendezvousStore store(RendezvousStore::Limits{4, 2});
  store.Open("ns", "s");
  EXPECT_EQ(store.Set("ns", "s", "a", "12345").code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store.Set("ns", "s", "a", "1").ok());
  ASSERT_TRUE(store.Set("ns", "s", "b", "1").ok());
  EXPECT_EQ(store.Set("ns", "s", "c", "1").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.Set("ns", "s", "a", "2").ok());  // overwriting is fine
  EXPECT_EQ(store.Set("ns", "s", "", "1").code(), absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousStore, BytesPerNamespaceAreResourceExhaustedNamingTheFlag) {
  RendezvousStore::Limits limits;
  limits.max_bytes_per_namespace = 100;
  RendezvousStore store(limits);
  store.Open("ns", "s");
  store.Open("other", "s");
  ASSERT_TRUE(store.Set("ns", "s", "a", std::string(59, 'x')).ok());  // 60 bytes held
  absl::Status s = store.Set("ns", "s", "b", std::string(59, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "rendezvous namespace ns would hold 120 bytes after setting b; limit 100 "
            "(--rendezvous_max_bytes_per_namespace)");
  // Replacing a value counts it once; other namespaces have their own budget.
  EXPECT_TRUE(store.Set("ns", "s", "a", std::string(99, 'x')).ok());
  EXPECT_TRUE(store.Set("other", "s", "b", std::string(59, 'x')).ok());
  // Re-opening (a new attempt) starts from zero.
  store.Open("ns", "s");
  EXPECT_TRUE(store.Set("ns", "s", "b", std::string(59, 'x')).ok());
}

TEST(RendezvousStore, LongKeysAreResourceExhaustedInSetAndGet) {
  RendezvousStore store;  // default limits: keys up to 4096 bytes
  store.Open("ns", "s");
  const std::string long_key(4097, 'k');
  absl::Status s = store.Set("ns", "s", long_key, "1");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "rendezvous key of 4097 bytes; limit 4096");
  auto got = store.Get("ns", "s", {long_key}, absl::ZeroDuration());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.Set("ns", "s", std::string(4096, 'k'), "1").ok());
}

// The audit's request: a 1 MiB value, then a get naming its key 2,000 times (a 10 KB request)
// built a 2,000 MiB response. Repeated keys are refused before anything is copied, and the
// values of distinct keys are bounded by --rendezvous_max_response_bytes.
TEST(RendezvousStore, RepeatedKeysAndLargeResponsesAreRefusedBeforeCopying) {
  RendezvousStore::Limits limits;
  limits.max_value_bytes = 1 << 20;
  limits.max_response_bytes = 2 << 20;
  RendezvousStore store(limits);
  store.Open("ns", "s");
  for (const char* k : {"a", "b", "c"}) {
    ASSERT_TRUE(store.Set("ns", "s", k, std::string(1 << 20, 'x')).ok());
  }
  const std::vector<std::string> repeated(2000, "a");
  auto got = store.Get("ns", "s", repeated, absl::ZeroDuration());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(), "rendezvous get names key a more than once");
  got = store.Get("ns", "s", {"a", "b", "c"}, absl::ZeroDuration());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(got.status().message(),
            "rendezvous namespace ns: the values of 3 keys add up to 3145728 bytes; limit "
            "2097152 (--rendezvous_max_response_bytes)");
  // Two values fit; the store is unchanged by the refusals.
  got = store.Get("ns", "s", {"a", "b"}, absl::ZeroDuration());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[1].size(), size_t{1} << 20);
  // More keys than a namespace may hold is refused without looking them up.
  RendezvousStore small(RendezvousStore::Limits{4, 2});
  small.Open("ns", "s");
  EXPECT_EQ(small.Get("ns", "s", {"a", "b", "c"}, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(RendezvousStore, JournalHearsAcceptedSetsAndClosesInOrder) {
  std::vector<std::string> heard;
  RendezvousStore::Journal journal;
  journal.put = [&](const std::string& ns, const std::string& key, const std::string& value) {
    heard.push_back("put " + ns + " " + key + "=" + value);
  };
  journal.drop = [&](const std::string& ns) { heard.push_back("drop " + ns); };
  RendezvousStore::Limits limits;
  limits.max_value_bytes = 4;
  RendezvousStore store(limits, journal);
  store.Open("job-1/1", "s");
  ASSERT_TRUE(store.Set("job-1/1", "s", "a", "1").ok());
  EXPECT_FALSE(store.Set("job-1/1", "s", "b", "too long").ok());  // refused: not journaled
  EXPECT_FALSE(store.Set("job-1/1", "wrong", "c", "1").ok());
  ASSERT_TRUE(store.Restore("job-1/1", "r", "2").ok());  // reloaded: the journal has it
  store.Open("job-1/1", "s2");                           // re-created empty
  store.Close("job-1/1");
  store.Close("job-1/1");  // unknown now: nothing to drop
  EXPECT_EQ(heard, (std::vector<std::string>{"put job-1/1 a=1", "drop job-1/1", "drop job-1/1"}));
}

TEST(RendezvousStore, RestoreKeepsTheLimitsAndNeedsAnOpenNamespace) {
  RendezvousStore::Limits limits;
  limits.max_value_bytes = 4;
  limits.max_keys_per_namespace = 1;
  RendezvousStore store(limits);
  EXPECT_EQ(store.Restore("job-1/1", "a", "1").code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(store.IsOpen("job-1/1"));
  store.Open("job-1/1", "s");
  EXPECT_TRUE(store.IsOpen("job-1/1"));
  EXPECT_EQ(store.Restore("job-1/1", "a", "too long").code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store.Restore("job-1/1", "a", "1").ok());
  absl::Status second = store.Restore("job-1/1", "b", "2");
  EXPECT_EQ(second.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.message().find("--rendezvous_max_keys_per_namespace"), std::string::npos);
  auto v = store.Get("job-1/1", "s", {"a"}, absl::ZeroDuration());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::vector<std::string>{"1"});
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace shardline::coordinator
