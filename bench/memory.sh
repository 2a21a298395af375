#!/usr/bin/env bash
# Per-rank memory for S = 1, 2, 4, 8 against 16*P/S (see bench/memory_bench_main.cc).
# Arguments go to the program: --shards=1,2,4,8 --n_embd=512 --n_layer=8.
# Writes bench/results/memory.txt.
source "$(dirname "$0")/common.sh"
bench_build //bench:memory_bench
mkdir -p bench/results
exec "$BIN/bench/memory_bench" --out="$REPO/bench/results/memory.txt" "$@"
