// checkpoint_verify: checks one committed checkpoint end to end, without loading it.
//
//   checkpoint_verify STEP_DIR [...]      (each a step directory holding MANIFEST.json)
//
// For each directory: opens the manifest (format version, ranges inside listed files), checks
// every data file's size and the CRC32C of every range (CheckpointReader::VerifyAll, the same
// checks a load makes). Prints one line per directory:
//   OK <dir> step <N> job <id> attempt <A> world <W> <strategy>
//   BAD <dir>: <status>
// Exit 0 when every directory verifies, 1 when one does not, 2 on bad usage. Used by the chaos
// soak (tests/soak/chaos_soak.py) and by hand.
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_reader.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: checkpoint_verify STEP_DIR [STEP_DIR...]\n";
    return 2;
  }
  int bad = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string dir = argv[i];
    absl::StatusOr<std::unique_ptr<shardline::checkpoint::CheckpointReader>> reader =
        shardline::checkpoint::CheckpointReader::OpenDir(dir);
    absl::Status s = reader.ok() ? (*reader)->VerifyAll() : reader.status();
    if (!s.ok()) {
      std::cout << "BAD " << dir << ": " << s << "\n";
      ++bad;
      continue;
    }
    const shardline::checkpoint::CheckpointMeta& m = (*reader)->meta();
    std::cout << "OK " << dir << " step " << m.step << " job " << m.job_id << " attempt "
              << m.attempt << " world " << m.world_size << " " << m.strategy << "\n";
  }
  return bad == 0 ? 0 : 1;
}
