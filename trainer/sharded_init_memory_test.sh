#!/usr/bin/env bash
# Sharded initialization under a CPU memory cap (SHARDLINE_CPU_MEMORY_CAP_MIB,
# trainer/cpu_memory_cap.h): a GPT whose float32 parameters alone (about 73 MiB) exceed the cap
# trains at W = 4 FULL_SHARD, where each rank holds a quarter of the parameters and gradients
# (plain SGD: no optimizer state; activation checkpointing keeps the activations small) from
# construction on, and fails at W = 1, where one rank would hold them all, with an out-of-memory
# error that names the cap (exit 2, docs/fsdp_step.md "Sharded initialization").
#   $1: the trainer binary   $2: the free-port helper
set -euo pipefail
TRAINER="$(realpath "$1")"
FREE_PORT="$(realpath "$2")"
SPEC="examples/tiny_gpt_shakespeare.yaml"
OUT="${TEST_TMPDIR:-$(mktemp -d)}"
CAP_MIB=${CAP_MIB:-64}
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# 24 blocks of 256 channels: 19.0M parameters, 72.6 MiB in float32; no block more than 3 MiB.
SETS=(--set model.n_embd=256 --set model.n_layer=24 --set model.n_head=4
  --set data.seq_len=32 --set train.global_batch_size=4 --set train.micro_batch_size=1
  --set train.steps=2 --set train.log_every=1 --set train.eval_every=0 --set train.sample_tokens=0
  --set optimizer.kind=SGD --set optimizer.momentum=0 --set optimizer.weight_decay=0
  --set fsdp.activation_checkpointing=true --set fsdp.collective_timeout_s=120)

# --- 1. W = 4 FULL_SHARD under the cap ----------------------------------------------------------
PORT="$("$FREE_PORT")"
pids=()
for r in 0 1 2 3; do
  SHARDLINE_CPU_MEMORY_CAP_MIB=$CAP_MIB RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
    "$TRAINER" --spec "$SPEC" "${SETS[@]}" --set fsdp.sharding_strategy=FULL_SHARD \
    --set fsdp.hybrid_shard_degree=0 --metrics_out "$OUT/metrics.$r.jsonl" \
    >"$OUT/out.$r" 2>"$OUT/log.$r" &
  pids+=($!)
done
for r in 0 1 2 3; do
  code=0
  wait "${pids[$r]}" || code=$?
  if [[ $code -ne 0 ]]; then
    fail "W=4 rank $r exited $code under a cap of $CAP_MIB MiB"
    tail -5 "$OUT/log.$r" >&2
  fi
done
grep -q "W=4 (R=1 x S=4) FULL_SHARD" "$OUT/log.0" || fail "rank 0 did not log the FULL_SHARD layout"
grep -q "GPT 24x256" "$OUT/log.0" || fail "rank 0 did not log the model"
grep -q '"step": 2, "loss": ' "$OUT/metrics.0.jsonl" || fail "rank 0 has no step 2 loss"
grep -h "CPU memory cap: peak" "$OUT"/log.* >&2 || fail "no rank logged its peak"

# --- 2. W = 1 under the same cap: a clear out-of-memory error -----------------------------------
code=0
SHARDLINE_CPU_MEMORY_CAP_MIB=$CAP_MIB "$TRAINER" --spec "$SPEC" "${SETS[@]}" \
  --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
  >"$OUT/out.w1" 2>"$OUT/log.w1" || code=$?
[[ $code -eq 2 ]] || fail "W=1 exited $code under a cap of $CAP_MIB MiB, want 2"
grep -qF "CPU memory cap of $CAP_MIB.0 MiB (SHARDLINE_CPU_MEMORY_CAP_MIB) exceeded" "$OUT/log.w1" ||
  fail "W=1's error does not name the cap: $(tail -2 "$OUT/log.w1")"
grep -q "RESOURCE_EXHAUSTED; exit 2" "$OUT/log.w1" || fail "W=1's error is not RESOURCE_EXHAUSTED"
tail -1 "$OUT/log.w1" >&2

# --- 3. A malformed cap is a bad environment ----------------------------------------------------
code=0
SHARDLINE_CPU_MEMORY_CAP_MIB=lots "$TRAINER" --spec "$SPEC" "${SETS[@]}" \
  --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
  >"$OUT/out.bad" 2>"$OUT/log.bad" || code=$?
[[ $code -eq 2 ]] || fail "a malformed cap exited $code, want 2"
grep -qF 'SHARDLINE_CPU_MEMORY_CAP_MIB: "lots" is not a positive number of MiB' "$OUT/log.bad" ||
  fail "the malformed cap's error: $(tail -1 "$OUT/log.bad")"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"
