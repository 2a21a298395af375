#include "common/secret_file.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace shardline {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WriteWithMode(const std::string& name, const std::string& content, mode_t mode) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::trunc) << content;
  chmod(path.c_str(), mode);
  return path;
}

TEST(ReadTokenFile, ReadsTheFirstLineOfAnOwnerOnlyFile) {
  const std::string path = WriteWithMode("owner.token", "  s3cret \nignored\n", 0600);
  auto token = ReadTokenFile(path, "--token_file");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret");
}

TEST(ReadTokenFile, RefusesGroupOrWorldReadableFilesNamingModeAndFix) {
  for (mode_t mode : {0640, 0604, 0644, 0660}) {
    const std::string path = WriteWithMode("shared.token", "s3cret\n", mode);
    auto token = ReadTokenFile(path, "--worker_token_file");
    ASSERT_FALSE(token.ok());
    EXPECT_EQ(token.status().code(), absl::StatusCode::kPermissionDenied);
    const std::string msg(token.status().message());
    EXPECT_NE(msg.find("--worker_token_file: " + path), std::string::npos) << msg;
    char mode_text[8];
    snprintf(mode_text, sizeof(mode_text), "%04o", mode);
    EXPECT_NE(msg.find(std::string("mode ") + mode_text), std::string::npos) << msg;
    EXPECT_NE(msg.find("chmod 600 " + path), std::string::npos) << msg;
  }
}

TEST(ReadTokenFile, MissingAndEmptyFilesAreErrorsNamingTheFile) {
  auto missing = ReadTokenFile(TempPath("no-such.token"), "--token_file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such.token"), std::string::npos);
  const std::string empty = WriteWithMode("empty.token", "\n", 0600);
  auto e = ReadTokenFile(empty, "--token_file");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find(empty + " is empty"), std::string::npos);
}

TEST(CheckOwnerOnlyFile, RefusesADirectory) {
  const absl::Status s = CheckOwnerOnlyFile(TempPath(""), "config");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos);
}

TEST(WriteOwnerOnlyFile, CreatesMode0600WhateverTheUmask) {
  const mode_t old = umask(0);
  const std::string path = TempPath("written.token");
  ASSERT_TRUE(WriteOwnerOnlyFile(path, "abc\n").ok());
  umask(old);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto token = ReadTokenFile(path, "test");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc");
  // Overwriting keeps 0600 even when the old file had a wider mode.
  chmod(path.c_str(), 0644);
  ASSERT_TRUE(WriteOwnerOnlyFile(path, "def\n").ok());
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(RandomToken, Is64HexCharactersAndDiffersEachCall) {
  const std::string a = RandomToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, RandomToken());
}

}  // namespace
}  // namespace shardline
