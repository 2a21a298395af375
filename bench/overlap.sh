#!/usr/bin/env bash
# Step time with real over no-op collectives, prefetch on and off, W = 2 (see bench/overlap.py).
# Arguments go to the driver: --reps=3 --steps=12. Writes bench/results/overlap.txt.
source "$(dirname "$0")/common.sh"
bench_build //trainer:trainer
exec "$PY" bench/overlap.py --trainer "$BIN/trainer/trainer" "$@"
