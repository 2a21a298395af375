#include "common/testing/temp_dir.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace shardline {

std::string FreshTempDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(t != nullptr ? t : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace shardline
