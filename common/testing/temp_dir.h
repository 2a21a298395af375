// Scratch directories for tests: one per name under Bazel's $TEST_TMPDIR (/tmp outside Bazel),
// emptied first so that a test starts from nothing even when a run reuses the directory.
//
// Thread safety: thread-safe for distinct names.
#ifndef SHARDLINE_COMMON_TESTING_TEMP_DIR_H_
#define SHARDLINE_COMMON_TESTING_TEMP_DIR_H_

#include <string>

namespace shardline {

// $TEST_TMPDIR/<name>, removed if it existed and created empty; returns its path.
std::string FreshTempDir(const std::string& name);

}  // namespace shardline

#endif  // SHARDLINE_COMMON_TESTING_TEMP_DIR_H_
