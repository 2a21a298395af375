#!/usr/bin/env bash
# GPU check (tag "gpu", not in the default test run): the trainer trains the tiny GPT on CUDA
# with the single-process backend and with the FSDP engine (W = 1), and both log the same losses.
#   $1: the trainer binary
set -euo pipefail
TRAINER="$(realpath "$1")"
OUT="${TEST_TMPDIR:-$(mktemp -d)}"
COMMON=(--spec examples/tiny_gpt_shakespeare.yaml --set device.kind=CUDA
        --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0
        --set train.steps=20 --set train.log_every=5 --set train.eval_every=10)
"$TRAINER" "${COMMON[@]}" --backend local --metrics_out "$OUT/local.jsonl" 2>"$OUT/local.log" ||
  { tail -20 "$OUT/local.log"; exit 1; }
"$TRAINER" "${COMMON[@]}" --backend fsdp --metrics_out "$OUT/fsdp.jsonl" 2>"$OUT/fsdp.log" ||
  { tail -20 "$OUT/fsdp.log"; exit 1; }
losses() { grep -o '"loss": [0-9.e+-]*' "$1" | cut -d' ' -f2; }
paste <(losses "$OUT/local.jsonl") <(losses "$OUT/fsdp.jsonl") |
  awk 'NF != 2 || ($1 - $2 > 1e-3 || $2 - $1 > 1e-3) { bad = 1 } END { exit bad || NR != 4 }' ||
  { echo "losses differ: $(losses "$OUT/local.jsonl" | tr '\n' ' ') vs $(losses "$OUT/fsdp.jsonl" | tr '\n' ' ')"; exit 1; }
first=$(losses "$OUT/local.jsonl" | head -1); last=$(losses "$OUT/local.jsonl" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' || { echo "loss did not fall"; exit 1; }
echo "GPU trainer checks passed"
