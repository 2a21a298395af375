#!/usr/bin/env bash
# Our trainer against PyTorch FSDP2 on CPU with Gloo (see bench/fsdp_vs_torch.py). Arguments go
# to the driver: bench/fsdp_vs_torch.sh --world_sizes=2,4 --reps=3 --steps=20
# Writes bench/results/fsdp_vs_torch.txt.
source "$(dirname "$0")/common.sh"
bench_build //trainer:trainer //bench:batch_dump
exec "$PY" bench/fsdp_vs_torch.py --trainer "$BIN/trainer/trainer" \
  --batch_dump "$BIN/bench/batch_dump" "$@"
