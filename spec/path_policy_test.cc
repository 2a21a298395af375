#include "spec/path_policy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::spec {
namespace {

using ::testing::HasSubstr;

JobSpec SpecWith(const std::string& data, const std::string& ckpt) {
  JobSpec spec;
  spec.mutable_data()->set_path(data);
  spec.mutable_checkpoint()->set_dir(ckpt);
  return spec;
}

PathPolicy Policy(std::vector<std::string> read, std::vector<std::string> ckpt) {
  PathPolicy p;
  p.read_roots = std::move(read);
  p.checkpoint_roots = std::move(ckpt);
  return p;
}

TEST(PathPolicy, NormalizeRemovesDotsAndRepeatedSlashes) {
  EXPECT_EQ(NormalizePath("/a/./b/../c//"), "/a/c");
  EXPECT_EQ(NormalizePath("/../../etc/passwd"), "/etc/passwd");
  EXPECT_EQ(NormalizePath("/data/../etc"), "/etc");
  EXPECT_EQ(NormalizePath("a/../../b"), "../b");
  EXPECT_EQ(NormalizePath("/"), "/");
}

TEST(PathPolicy, SpecPathsListsEverySetPathField) {
  JobSpec spec = SpecWith("/data/x.txt", "/ckpt");
  spec.mutable_model()->set_torchscript_path("/models/m.pt");
  spec.mutable_checkpoint()->set_init_from_safetensors("/models/w.safetensors");
  spec.mutable_checkpoint()->set_resume_from("/ckpt/job-a/step_10");
  spec.mutable_train()->set_tensorboard_dir("/ckpt/tb");
  std::vector<std::string> fields;
  for (const SpecPath& p : SpecPaths(spec)) fields.push_back(p.field);
  EXPECT_EQ(fields, (std::vector<std::string>{
                        "data.path", "model.torchscript_path", "checkpoint.init_from_safetensors",
                        "checkpoint.resume_from", "checkpoint.dir", "train.tensorboard_dir"}));
  EXPECT_EQ(SpecPaths(spec).back().access, SpecPath::Access::kCheckpoint);
  EXPECT_EQ(SpecPaths(JobSpec()).size(), 0u);
}

TEST(PathPolicy, PathsInsideTheirRootsPass) {
  const PathPolicy p = Policy({"/data", "/models"}, {"/ckpt"});
  EXPECT_TRUE(CheckSpecPaths(SpecWith("/data/a/b.txt", "/ckpt/team"), p, false).ok());
  EXPECT_TRUE(CheckSpecPaths(SpecWith("/models/x", "/ckpt"), p, false).ok());
  EXPECT_TRUE(CheckSpecPaths(SpecWith("/data/x", "/anything"), Policy({"/data"}, {}), false).ok());
  EXPECT_TRUE(CheckSpecPaths(SpecWith("/etc/passwd", "/x"), PathPolicy(), false).ok());
}

TEST(PathPolicy, OutsideDotDotPrefixTrickAndRelativeAreRefusedNamingFieldAndRoots) {
  const PathPolicy p = Policy({"/data"}, {"/ckpt"});
  absl::Status s = CheckSpecPaths(SpecWith("/etc/shadow", "/tmp/x"), p, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "data.path: /etc/shadow is outside the read roots [/data] allowed by the coordinator "
            "(--read_roots)\n"
            "checkpoint.dir: /tmp/x is outside the checkpoint roots [/ckpt] allowed by the "
            "coordinator (--checkpoint_roots)");
  // ".." anywhere (out of the root or not), and a sibling sharing the root's prefix.
  EXPECT_THAT(CheckSpecPaths(SpecWith("/data/../etc/passwd", "/ckpt"), p, false).message(),
              HasSubstr("data.path: /data/../etc/passwd has a \"..\" component, which is "
                        "refused under the read roots [/data]"));
  EXPECT_THAT(CheckSpecPaths(SpecWith("/data/a/../b", "/ckpt"), p, false).message(),
              HasSubstr("data.path: /data/a/../b has a \"..\" component"));
  EXPECT_THAT(CheckSpecPaths(SpecWith("/data2/x", "/ckpt"), p, false).message(),
              HasSubstr("data.path: /data2/x is outside"));
  EXPECT_THAT(CheckSpecPaths(SpecWith("data/x", "/ckpt"), p, false).message(),
              HasSubstr("data.path: \"data/x\" must be an absolute path under the read roots"));
}

TEST(PathPolicy, ResumeFromIsReadUnderTheCheckpointRoots) {
  // Another job's checkpoint lives where checkpoints are written, not under the data roots.
  const PathPolicy p = Policy({"/data"}, {"/ckpt"});
  JobSpec ok = SpecWith("/data/x", "/ckpt/team");
  ok.mutable_checkpoint()->set_resume_from("/ckpt/team/job-a/step_10");
  EXPECT_TRUE(CheckSpecPaths(ok, p, false).ok());
  JobSpec outside = ok;
  outside.mutable_checkpoint()->set_resume_from("/data/job-a/step_10");
  EXPECT_EQ(CheckSpecPaths(outside, p, false).message(),
            "checkpoint.resume_from: /data/job-a/step_10 is outside the checkpoint roots [/ckpt] "
            "allowed by the coordinator (--checkpoint_roots)");
}

TEST(PathPolicy, TensorBoardDirIsBoundByTheCheckpointRoots) {
  const PathPolicy p = Policy({"/data"}, {"/ckpt"});
  JobSpec spec = SpecWith("/data/x", "/ckpt/a");
  spec.mutable_train()->set_tensorboard_dir("/ckpt/tb");
  EXPECT_TRUE(CheckSpecPaths(spec, p, false).ok());
  spec.mutable_train()->set_tensorboard_dir("/data/tb");  // a read root does not do
  const absl::Status s = CheckSpecPaths(spec, p, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "train.tensorboard_dir: /data/tb is outside the checkpoint roots [/ckpt] allowed by "
            "the coordinator (--checkpoint_roots)");
}

TEST(PathPolicy, WorkerCheckRefusesASymlinkOutOfARoot) {
  const std::string base = std::string(std::getenv("TEST_TMPDIR")) + "/links";
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base + "/data");
  std::filesystem::create_directories(base + "/secret");
  std::filesystem::create_directories(base + "/real_ckpt");
  std::filesystem::create_symlink(base + "/secret", base + "/data/escape");
  std::filesystem::create_symlink(base + "/real_ckpt", base + "/ckpt");  // the root is a link
  PathPolicy p = Policy({base + "/data"}, {base + "/ckpt"});
  p.owner = "worker node-a";
  const JobSpec spec = SpecWith(base + "/data/escape/key.pem", base + "/ckpt/job/new_dir");
  EXPECT_TRUE(CheckSpecPaths(spec, p, /*resolve_links=*/false).ok());  // lexically inside
  absl::Status s = CheckSpecPaths(spec, p, /*resolve_links=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "data.path: " + base + "/data/escape/key.pem resolves to " + base +
                "/secret/key.pem (a symbolic link), which is outside the read roots [" + base +
                "/data] allowed by the worker node-a (--read_roots)");
}

// The bypass an audit found live: with a link R/lnk -> / under the read root, R/lnk/../secret
// is R/secret to the text but /secret to the kernel. Refused by the text already (the
// coordinator's check), and by the worker's.
TEST(PathPolicy, DotDotAfterASymlinkIsRefusedByBothChecks) {
  const std::string base = std::string(std::getenv("TEST_TMPDIR")) + "/dotdot";
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base + "/data");
  std::filesystem::create_directories(base + "/ckpt");
  std::filesystem::create_symlink("/", base + "/data/lnk");
  std::filesystem::create_symlink("/", base + "/ckpt/lnk2");
  const PathPolicy p = Policy({base + "/data"}, {base + "/ckpt"});
  const JobSpec spec = SpecWith(base + "/data/lnk/../etc/passwd", base + "/ckpt/lnk2/../tmp/x");
  for (bool resolve : {false, true}) {
    const absl::Status s = CheckSpecPaths(spec, p, resolve);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << resolve;
    EXPECT_THAT(s.message(), HasSubstr("data.path: " + base + "/data/lnk/../etc/passwd has a"));
    EXPECT_THAT(s.message(), HasSubstr("checkpoint.dir: " + base + "/ckpt/lnk2/../tmp/x has a"));
  }
}

TEST(PathPolicy, WorkerCheckRefusesAReadPathThatIsNotARegularFile) {
  const std::string base = std::string(std::getenv("TEST_TMPDIR")) + "/kinds";
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base + "/data/folder");
  ASSERT_EQ(::mkfifo((base + "/data/fifo").c_str(), 0600), 0);
  std::filesystem::create_symlink("/dev/zero", base + "/data/zero");
  // A root that holds /dev (the policy allows it; the kind does not).
  const PathPolicy p = Policy({base + "/data", "/dev"}, {});
  EXPECT_THAT(CheckSpecPaths(SpecWith(base + "/data/fifo", ""), p, true).message(),
              HasSubstr("data.path: " + base +
                        "/data/fifo is not a regular file (a device, "
                        "FIFO or socket)"));
  EXPECT_THAT(CheckSpecPaths(SpecWith("/dev/zero", ""), p, true).message(),
              HasSubstr("data.path: /dev/zero is not a regular file"));
  EXPECT_THAT(CheckSpecPaths(SpecWith(base + "/data/folder", ""), p, true).message(),
              HasSubstr("is not a regular file (a folder)"));
  // The lexical check cannot see kinds.
  EXPECT_TRUE(CheckSpecPaths(SpecWith(base + "/data/fifo", ""), p, false).ok());
  // A missing file is spec validation's to name, not the policy's.
  EXPECT_TRUE(CheckSpecPaths(SpecWith(base + "/data/absent", ""), p, true).ok());
}

TEST(PathPolicy, WorkerCheckWalksTheFoldersAJobReadsAndWritesIn) {
  const std::string base = std::string(std::getenv("TEST_TMPDIR")) + "/walk";
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base + "/data/hf");
  std::filesystem::create_directories(base + "/ckpt/job-a/step_4");
  std::filesystem::create_directories(base + "/ckpt/job-b");
  std::filesystem::create_directories(base + "/secret");
  std::ofstream(base + "/data/hf/config.json") << "{}";
  std::ofstream(base + "/secret/key.pem") << "x";
  const PathPolicy p = Policy({base + "/data"}, {base + "/ckpt"});
  JobSpec spec = SpecWith(base + "/data/x", base + "/ckpt");
  spec.mutable_model()->set_hf_dir(base + "/data/hf");
  EXPECT_TRUE(CheckSpecPaths(spec, p, true, "job-a").ok());

  // A shard of the HF folder that is a link out of the roots.
  std::filesystem::create_symlink(base + "/secret/key.pem", base + "/data/hf/model.safetensors");
  absl::Status s = CheckSpecPaths(spec, p, true, "job-a");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("model.hf_dir: " + base +
                                     "/data/hf/model.safetensors is a symbolic link to " + base +
                                     "/secret/key.pem, which is outside the read roots"));
  std::filesystem::remove(base + "/data/hf/model.safetensors");

  // A file planted in the job's own checkpoint folder that links out (a write would follow it),
  // and one that links to nothing (a write would create it).
  std::filesystem::create_symlink(base + "/secret/key.pem",
                                  base + "/ckpt/job-a/step_4/shard_0.safetensors");
  std::filesystem::create_symlink(base + "/secret/new", base + "/ckpt/job-a/step_4/MANIFEST.json");
  s = CheckSpecPaths(spec, p, true, "job-a");
  EXPECT_THAT(s.message(), HasSubstr("step_4/shard_0.safetensors is a symbolic link to " + base +
                                     "/secret/key.pem, which is outside the checkpoint roots"));
  EXPECT_THAT(s.message(), HasSubstr("step_4/MANIFEST.json is a symbolic link to nothing"));
  // Another job's folder is not this job's to check.
  EXPECT_TRUE(CheckSpecPaths(spec, p, true, "job-b").ok());

  // The job's folder itself a link out of the roots (planted before the job starts).
  std::filesystem::create_symlink(base + "/secret", base + "/ckpt/job-c");
  EXPECT_THAT(CheckSpecPaths(spec, p, true, "job-c").message(),
              HasSubstr("checkpoint.dir: " + base + "/ckpt/job-c resolves to " + base +
                        "/secret (a symbolic link), which is outside the checkpoint roots"));
}

TEST(PathPolicy, ParseRootsRefusesRelativeAndSlashOnly) {
  auto roots = ParseRoots("read_roots", " /data/, /models/./x ,");
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_EQ(*roots, (std::vector<std::string>{"/data", "/models/x"}));
  EXPECT_TRUE(ParseRoots("read_roots", "")->empty());
  EXPECT_EQ(ParseRoots("read_roots", "data").status().message(),
            "--read_roots: root \"data\" must be an absolute path");
  EXPECT_EQ(ParseRoots("checkpoint_roots", "/a/..").status().message(),
            "--checkpoint_roots: root \"/a/..\" allows every path; leave --checkpoint_roots "
            "empty instead");
}

TEST(PathPolicy, SpecPathsListsTheDataListHfFolderValidationAndVocabulary) {
  JobSpec spec;
  spec.mutable_data()->add_paths("/data/a.bin");
  spec.mutable_data()->add_paths("/data/b.bin");
  spec.mutable_data()->set_val_path("/data/val.bin");
  spec.mutable_data()->set_vocab_path("/data/tokens.vocab");
  spec.mutable_model()->set_hf_dir("/models/llama");
  std::vector<std::string> fields;
  for (const SpecPath& p : SpecPaths(spec)) fields.push_back(p.field);
  EXPECT_EQ(fields, (std::vector<std::string>{"data.paths[0]", "data.paths[1]", "data.val_path",
                                              "data.vocab_path", "model.hf_dir"}));
  EXPECT_EQ(SpecPaths(spec).back().access, SpecPath::Access::kReadDir);
  // Every one is a read path: outside the read roots is refused by field.
  spec.mutable_data()->set_paths(1, "/etc/passwd");
  spec.mutable_model()->set_hf_dir("/home/x/llama");
  const absl::Status s = CheckSpecPaths(spec, Policy({"/data", "/models"}, {"/ckpt"}), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("data.paths[1]: /etc/passwd is outside"), std::string::npos) << s;
  EXPECT_NE(s.message().find("model.hf_dir: /home/x/llama is outside"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardline::spec
