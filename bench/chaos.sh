#!/usr/bin/env bash
# Chaos soak (issue #30): a local cluster of three workers runs a stream of jobs for --minutes
# (default 20) under a seeded fault injector, then checks that nothing was lost (see
# tests/soak/chaos_soak.py and docs/failures.md, "Chaos soak"). Not part of tools/test.sh.
# Needs root and iproute2 (a network namespace, a tmpfs). Arguments go to the driver:
#   bench/chaos.sh --minutes 3 --seed 42
# Writes bench/results/chaos_soak.txt (or --out FILE); exits 0 only when nothing was lost.
source "$(dirname "$0")/common.sh"
bench_build //coordinator:coordinator //worker:worker //trainer:trainer //cli:shardctl \
  //checkpoint:checkpoint_verify
exec "$PY" tests/soak/chaos_soak.py --bin "$BIN" "$@"
