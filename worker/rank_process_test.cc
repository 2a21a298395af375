#include "worker/rank_process.h"

#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardline::worker {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

TEST(RankProcess, ExitCodeEnvAndLogAreReported) {
  RankProcess::Options o;
  o.argv = {"/bin/sh", "-c", "echo rank=$RANK world=$WORLD_SIZE; echo oops >&2; exit 3"};
  o.env = {{"RANK", "2"}, {"WORLD_SIZE", "4"}};
  o.log_path = TempPath("exit.log");
  auto p = RankProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->WaitFor(absl::Seconds(10)), 3);
  const std::string tail = (*p)->LogTail();
  EXPECT_TRUE(absl::StrContains(tail, "rank=2 world=4")) << tail;
  EXPECT_TRUE(absl::StrContains(tail, "oops")) << tail;
  EXPECT_EQ(DescribeExit(3), "exited with code 3");
}

// A stop as the daemon's stop thread does it: SIGTERM, and SIGKILL once `grace` has passed;
// returns the exit code once the process is reaped.
int StopAsTheDaemonDoes(RankProcess& p, absl::Duration grace) {
  p.Terminate();
  if (std::optional<int> code = p.WaitFor(grace)) return *code;
  p.Kill();
  return p.WaitFor(absl::Seconds(10)).value_or(0);
}

TEST(RankProcess, StopSendsTermThenKillAfterGrace) {
  RankProcess::Options o;
  // Ignores SIGTERM, so only the SIGKILL after the grace period ends it.
  o.argv = {"/bin/sh", "-c", "trap '' TERM; while true; do sleep 0.05; done"};
  o.log_path = TempPath("stop.log");
  auto p = RankProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::SleepFor(absl::Milliseconds(200));
  const int code = StopAsTheDaemonDoes(**p, absl::Milliseconds(300));
  EXPECT_EQ(code, -SIGKILL);
  EXPECT_EQ(DescribeExit(code), "killed by SIGKILL");
}

// A rank frozen with SIGSTOP (a stalled collective in the failure scenarios) keeps its SIGTERM
// pending; the SIGKILL after the grace period ends it, and it is reaped (no zombie left).
TEST(RankProcess, StopKillsAndReapsAStoppedProcess) {
  RankProcess::Options o;
  o.argv = {"/bin/sh", "-c", "while true; do sleep 0.05; done"};
  o.log_path = TempPath("stopped.log");
  auto p = RankProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  const pid_t pid = (*p)->pid();
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  // Poll never mistakes a stopped process for an ended one.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE((*p)->Poll().has_value());
  const int code = StopAsTheDaemonDoes(**p, absl::Milliseconds(300));
  EXPECT_EQ(code, -SIGKILL);
  // Reaped: the pid no longer exists at all (a zombie would still answer kill(pid, 0)).
  EXPECT_FALSE(Alive(pid));
  EXPECT_EQ(errno, ESRCH);
}

// The daemon blocks SIGTERM in all its threads (worker_main.cc: a sigwait thread takes it); a
// rank started from such a thread must still get the SIGTERM of a stop, at once, not only the
// SIGKILL after the grace period.
TEST(RankProcess, SigtermReachesARankStartedFromAThreadThatBlocksIt) {
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  RankProcess::Options o;
  // sleep itself, not a shell: shells unblock signals when they set traps.
  o.argv = {"/bin/sleep", "60"};
  o.log_path = TempPath("term_masked.log");
  auto p = RankProcess::Start(o);
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::SleepFor(absl::Milliseconds(100));
  // A grace period far above sleep's reaction time: only the SIGTERM can end it in time.
  (*p)->Terminate();
  const std::optional<int> code = (*p)->WaitFor(absl::Seconds(5));
  if (!code.has_value()) (*p)->Kill();
  ASSERT_TRUE(code.has_value()) << "the rank ignored SIGTERM (blocked by the inherited mask)";
  EXPECT_EQ(*code, -SIGTERM);
}

// The hex signal set of `field` ("SigBlk", "ShdPnd") in /proc/<pid>/status.
uint64_t SignalSet(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0)
      return std::stoull(line.substr(field.size() + 1), nullptr, 16);
  }
  return 0;
}

TEST(RankProcess, APreemptBeforeTheTrainersHandlerWaitsPendingInsteadOfKillingIt) {
  RankProcess::Options o;
  o.argv = {"/bin/sleep", "60"};  // Never installs a handler: SIGUSR1's default would kill it.
  o.log_path = TempPath("preempt.log");
  auto p = RankProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::SleepFor(absl::Milliseconds(100));
  const uint64_t usr1 = uint64_t{1} << (SIGUSR1 - 1);
  EXPECT_NE(SignalSet((*p)->pid(), "SigBlk") & usr1, 0u);
  (*p)->Preempt();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE((*p)->Poll().has_value()) << "SIGUSR1 killed a rank that had no handler yet";
  EXPECT_NE(SignalSet((*p)->pid(), "ShdPnd") & usr1, 0u);  // Pending, for the trainer.
  EXPECT_EQ(SignalSet((*p)->pid(), "SigBlk") & (uint64_t{1} << (SIGTERM - 1)), 0u);
  (*p)->Kill();
  (*p)->WaitFor(absl::Seconds(5));
}

TEST(RankProcess, StopReachesGrandchildren) {
  RankProcess::Options o;
  const std::string pidfile = TempPath("grandchild.pid");
  o.argv = {"/bin/sh", "-c", "sleep 60 & echo $! > " + pidfile + "; wait"};
  o.log_path = TempPath("grand.log");
  auto p = RankProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  pid_t grandchild = 0;
  for (int i = 0; i < 100 && grandchild == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    std::ifstream in(pidfile);
    in >> grandchild;
  }
  ASSERT_GT(grandchild, 0);
  StopAsTheDaemonDoes(**p, absl::Seconds(2));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(Alive(grandchild));
}

TEST(RankProcess, RunsAsTheTrainerUserWhenGivenOne) {
  if (geteuid() != 0 || getpwnam("nobody") == nullptr) GTEST_SKIP() << "needs root and nobody";
  auto user = ResolveTrainerUser("nobody");
  ASSERT_TRUE(user.ok()) << user.status();
  RankProcess::Options o;
  // Real, effective and saved ids all switched; the groups are the user's alone.
  o.argv = {"/bin/sh", "-c", "echo ids $(id -ru) $(id -u) $(id -rg) groups $(id -G)"};
  o.log_path = TempPath("as_user.log");
  o.working_dir = "/";
  o.user = *user;
  auto p = RankProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->WaitFor(absl::Seconds(10)), 0);
  std::string groups;
  for (gid_t g : user->groups) groups += (groups.empty() ? "" : " ") + std::to_string(g);
  const std::string tail = (*p)->LogTail();
  EXPECT_TRUE(absl::StrContains(
      tail, absl::StrCat("ids ", user->uid, " ", user->uid, " ", user->gid, " groups ", groups)))
      << tail;
}

TEST(RankProcess, MissingExecutableIsInvalidArgumentNamingIt) {
  RankProcess::Options o;
  o.argv = {"/nonexistent/trainer"};
  o.log_path = TempPath("missing.log");
  auto p = RankProcess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(p.status().message(), "/nonexistent/trainer")) << p.status();
}

}  // namespace
}  // namespace shardline::worker
