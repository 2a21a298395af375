// checkpoint_export: writes a committed checkpoint's parameters to one .safetensors file.
//
//   checkpoint_export ROOT STEP OUT      (STEP -1: the latest committed checkpoint)
//
// The library call behind it is checkpoint/safetensors.h ExportSafetensors (shardctl export
// uses the same). Exit 0 on success, 1 with the error on stderr otherwise.
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "checkpoint/safetensors.h"

int main(int argc, char** argv) {
  int64_t step = 0;
  if (argc != 4 || !absl::SimpleAtoi(argv[2], &step)) {
    std::cerr << "usage: checkpoint_export ROOT STEP OUT   (STEP -1: latest)\n";
    return 2;
  }
  absl::Status s = shardline::checkpoint::ExportSafetensors(argv[1], step, argv[3]);
  if (!s.ok()) {
    std::cerr << "checkpoint_export: " << s << "\n";
    return 1;
  }
  return 0;
}
