// checkpoint_export: writes a committed checkpoint's parameters to one .safetensors file, or the
// checkpoint as a PyTorch DCP directory.
//
//   checkpoint_export ROOT STEP OUT      (STEP -1: the latest committed checkpoint)
//   checkpoint_export --dcp [--with_optimizer] STEP_DIR OUT_DIR
//
// The library calls behind it are checkpoint/safetensors.h ExportSafetensors and
// checkpoint/dcp_export.h ExportDcpFromStepDir (shardctl export uses the same). Exit 0 on
// success, 1 with the error on stderr otherwise, 2 for a usage error.
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "checkpoint/dcp_export.h"
#include "checkpoint/safetensors.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::Status s;
  if (!args.empty() && args[0] == "--dcp") {
    const bool optimizer = args.size() == 4 && args[1] == "--with_optimizer";
    if (args.size() != (optimizer ? 4u : 3u)) {
      std::cerr << "usage: checkpoint_export --dcp [--with_optimizer] STEP_DIR OUT_DIR\n";
      return 2;
    }
    s = shardline::checkpoint::ExportDcpFromStepDir(args[args.size() - 2], args.back(), optimizer);
  } else {
    int64_t step = 0;
    if (args.size() != 3 || !absl::SimpleAtoi(args[1], &step)) {
      std::cerr << "usage: checkpoint_export ROOT STEP OUT   (STEP -1: latest)\n"
                   "       checkpoint_export --dcp [--with_optimizer] STEP_DIR OUT_DIR\n";
      return 2;
    }
    s = shardline::checkpoint::ExportSafetensors(args[0], step, args[2]);
  }
  if (!s.ok()) {
    std::cerr << "checkpoint_export: " << s << "\n";
    return 1;
  }
  return 0;
}
