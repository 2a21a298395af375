#!/usr/bin/env bash
# The README's main command. Installs what is missing, builds, and runs the main job.
# Today (foundation stage) the main job is the smoke checks: LibTorch autograd, a gRPC round trip
# on the generated service, and a two-process Gloo all-gather, with their output shown.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash tools/setup.sh
bazel test --nocache_test_results --test_output=all \
  //tests/smoke:torch_autograd_smoke_test \
  //tests/smoke:grpc_roundtrip_smoke_test \
  //tests/smoke:gloo_allgather_smoke_test
