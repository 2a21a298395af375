#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/auth/user_table.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

std::string Write(const std::string& name, const std::string& text, mode_t mode) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  chmod(path.c_str(), mode);
  return path;
}

TEST(ParseUsers, ReadsNamesTokensAdminsAndComments) {
  auto users = ParseUsers("# users\n\nalice  tok-a\nroot\ttok-r admin  # the admin\n", "u.txt");
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_EQ(users->size(), 2u);
  EXPECT_EQ((*users)[0].name, "alice");
  EXPECT_EQ((*users)[0].token, "tok-a");
  EXPECT_FALSE((*users)[0].admin);
  EXPECT_EQ((*users)[1].name, "root");
  EXPECT_TRUE((*users)[1].admin);
}

TEST(ParseUsers, ReadsEachUsersOwnQuotas) {
  auto users = ParseUsers(
      "alice tok-a max_running_ranks=8\nbob tok-b max_pending_jobs=2 admin max_running_ranks=0\n"
      "carol tok-c\n",
      "u.txt");
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_EQ(users->size(), 3u);
  EXPECT_EQ((*users)[0].limits.max_running_ranks, 8);
  EXPECT_FALSE((*users)[0].limits.max_pending_jobs.has_value());
  EXPECT_TRUE((*users)[1].admin);
  EXPECT_EQ((*users)[1].limits.max_pending_jobs, 2);
  EXPECT_EQ((*users)[1].limits.max_running_ranks, 0);
  EXPECT_FALSE((*users)[2].limits.max_running_ranks.has_value());
}

TEST(ParseUsers, RefusesBadLinesNamingThem) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"alice\n",
       "u.txt:1: expected \"<name> <token> [admin] [max_running_ranks=N] [max_pending_jobs=N]\", "
       "got 1 field(s)"},
      {"alice t admin extra\n",
       "u.txt:1: field \"extra\" is not \"admin\", \"max_running_ranks=N\" or "
       "\"max_pending_jobs=N\""},
      {"\nalice t root\n", "u.txt:2: field \"root\" is not \"admin\""},
      {"alice t admin admin\n", "u.txt:1: field \"admin\" is not"},
      {"alice t max_running_ranks=-1\n",
       "u.txt:1: max_running_ranks=\"-1\" must be a whole number >= 0 (0: none)"},
      {"alice t max_pending_jobs=x\n", "u.txt:1: max_pending_jobs=\"x\" must be a whole number"},
      {"alice t max_pending_jobs=1 max_pending_jobs=2\n",
       "u.txt:1: max_pending_jobs is given twice"},
      {"alice t max_gpus=2\n", "u.txt:1: field \"max_gpus=2\" is not"},
      {"al/ice t\n", "user name \"al/ice\" must be [A-Za-z0-9_.@-]+"},
      {"alice t\nalice u\n", "u.txt:2: user alice is listed twice"},
      {"alice t\nbob t\n", "u.txt:2: the token of user bob is already another user's"},
  };
  for (const Case& c : cases) {
    auto users = ParseUsers(c.text, "u.txt");
    EXPECT_EQ(users.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(users.status().message().find(c.message), std::string::npos)
        << c.text << ": " << users.status();
  }
}

TEST(UserTable, LegacyTokenIsAdminAndTheFileAddsUsers) {
  const std::string path = Write("users.txt", "alice tok-a\nroot tok-r admin\n", 0600);
  auto table = UserTable::Create(path, "legacy");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ((*table)->size(), 3u);
  EXPECT_EQ((*table)->Find("legacy")->name, "admin");
  EXPECT_TRUE((*table)->Find("legacy")->admin);
  EXPECT_EQ((*table)->Find("tok-a")->name, "alice");
  EXPECT_FALSE((*table)->Find("tok-a")->admin);
  EXPECT_FALSE((*table)->Find("tok-x").has_value());
  EXPECT_FALSE((*table)->Find("").has_value());
  auto none = UserTable::Create("", "");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)->empty());
}

TEST(UserTable, RefusesOpenModesAndClashesWithTheLegacyToken) {
  const std::string open = Write("open.txt", "alice tok-a\n", 0644);
  auto t = UserTable::Create(open, "");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("has mode 0644"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("chmod 600"), std::string::npos) << t.status();
  const std::string admin = Write("admin.txt", "admin tok-a\n", 0600);
  t = UserTable::Create(admin, "legacy");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("user \"admin\" is the --token/--token_file user"),
            std::string::npos)
      << t.status();
  const std::string same = Write("same.txt", "alice legacy\n", 0600);
  t = UserTable::Create(same, "legacy");
  EXPECT_NE(t.status().message().find("the token of user alice is the --token/--token_file token"),
            std::string::npos)
      << t.status();
  EXPECT_EQ(UserTable::Create("/nonexistent/users", "").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(UserTable, ReloadTakesAGoodEditAndKeepsTheOldTableOnABadOne) {
  const std::string path = Write("reload.txt", "alice tok-a\n", 0600);
  auto t = UserTable::Create(path, "");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(*(*t)->ReloadIfChanged());  // unchanged
  Write("reload.txt", "alice tok-a\nbob tok-b admin\n", 0600);
  auto r = (*t)->ReloadIfChanged();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(*r);
  EXPECT_TRUE((*t)->Find("tok-b")->admin);
  Write("reload.txt", "alice\n", 0600);
  r = (*t)->ReloadIfChanged();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("reload.txt:1:"), std::string::npos) << r.status();
  EXPECT_TRUE((*t)->Find("tok-b").has_value());  // the old table stays
  EXPECT_FALSE(*(*t)->ReloadIfChanged());        // reported once
  Write("reload.txt", "carol tok-c max_running_ranks=3\n", 0600);
  EXPECT_TRUE(*(*t)->ReloadIfChanged());
  EXPECT_FALSE((*t)->Find("tok-b").has_value());
  EXPECT_EQ((*t)->Find("tok-c")->name, "carol");
  // The limits come with the table they were read with.
  const auto limits = (*t)->Limits();
  ASSERT_EQ(limits.size(), 1u);
  EXPECT_EQ(limits.at("carol").max_running_ranks, 3);
}

}  // namespace
}  // namespace shardline::coordinator
