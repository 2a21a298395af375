#include "worker/rank_files.h"

#include "absl/strings/str_cat.h"

namespace shardline::worker {

RankFiles RankFilesFor(const std::string& attempt_dir, int rank, int generation) {
  // Generation 0 keeps the names from before replacements existed.
  const std::string tag =
      generation > 0 ? absl::StrCat(rank, ".gen", generation) : absl::StrCat(rank);
  RankFiles f;
  f.spec = absl::StrCat(attempt_dir, "/spec-rank-", tag, ".yaml");
  f.metrics = absl::StrCat(attempt_dir, "/metrics-rank-", tag, ".jsonl");
  f.log = absl::StrCat(attempt_dir, "/rank-", tag, ".log");
  return f;
}

}  // namespace shardline::worker
