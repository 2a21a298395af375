#!/usr/bin/env bash
# Sharded initialization under a CPU memory cap (SHARDLINE_CPU_MEMORY_CAP_MIB,
# trainer/cpu_memory_cap.h): a GPT whose float32 parameters alone (about 73 MiB) exceed the cap
# trains at W = 4 FULL_SHARD, where each rank holds a quarter of the parameters and gradients
# (plain SGD: no optimizer state; activation checkpointing keeps the activations small) from
# construction on, and fails at W = 1, where one rank would hold them all, with an out-of-memory
# error that names the cap (exit 2, docs/fsdp_step.md "Sharded initialization"). The same for a
# TorchScript file of that size (written by models/testdata/make_blocks_lm.py, sharded per block):
# each rank reads only its ranges from the file (models/torchscript_file.h).
#   $1: the trainer binary   $2: the free-port helper   $3: run_venv_python.sh
#   $4: make_blocks_lm.py   $5: the training text
set -euo pipefail
TRAINER="$(realpath "$1")"
FREE_PORT="$(realpath "$2")"
VENV_PYTHON="$(realpath "$3")"
MAKE_BLOCKS="$(realpath "$4")"
DATA="$(realpath "$5")"
SPEC="examples/tiny_gpt_shakespeare.yaml"
OUT="${TEST_TMPDIR:-$(mktemp -d)}"
CAP_MIB=${CAP_MIB:-64}
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
source trainer/testing/ranks.sh  # run_ranks

# 24 blocks of 256 channels: 19.0M parameters, 72.6 MiB in float32; no block more than 3 MiB.
SETS=(--set model.n_embd=256 --set model.n_layer=24 --set model.n_head=4
  --set data.seq_len=32 --set train.global_batch_size=4 --set train.micro_batch_size=1
  --set train.steps=2 --set train.log_every=1 --set train.eval_every=0 --set train.sample_tokens=0
  --set optimizer.kind=SGD --set optimizer.momentum=0 --set optimizer.weight_decay=0
  --set fsdp.activation_checkpointing=true --set fsdp.collective_timeout_s=120)

# run_w4 NAME SPEC ARGS...: four FULL_SHARD ranks under the cap; each must exit 0.
run_w4() {
  local name=$1 spec=$2
  shift 2
  run_ranks "$name (W=4 under a cap of $CAP_MIB MiB)" 4 "$OUT/$name.out.{r}" \
    "$OUT/$name.log.{r}" SHARDLINE_CPU_MEMORY_CAP_MIB=$CAP_MIB -- \
    --spec "$spec" "$@" --set fsdp.sharding_strategy=FULL_SHARD \
    --set fsdp.hybrid_shard_degree=0 --metrics_out "$OUT/$name.metrics.{r}.jsonl"
  grep -q "W=4 (R=1 x S=4) FULL_SHARD" "$OUT/$name.log.0" || fail "$name: no FULL_SHARD layout logged"
  grep -q '"step": 2, "loss": ' "$OUT/$name.metrics.0.jsonl" || fail "$name: rank 0 has no step 2 loss"
  grep -h "CPU memory cap: peak" "$OUT/$name".log.* >&2 || fail "$name: no rank logged its peak"
}

# run_w1 NAME SPEC ARGS...: one rank under the same cap must fail naming it.
run_w1() {
  local name=$1 spec=$2 code=0
  shift 2
  SHARDLINE_CPU_MEMORY_CAP_MIB=$CAP_MIB "$TRAINER" --spec "$spec" "$@" \
    --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
    >"$OUT/$name.out.w1" 2>"$OUT/$name.log.w1" || code=$?
  [[ $code -eq 2 ]] || fail "$name: W=1 exited $code under a cap of $CAP_MIB MiB, want 2"
  grep -qF "CPU memory cap of $CAP_MIB.0 MiB (SHARDLINE_CPU_MEMORY_CAP_MIB) exceeded" \
    "$OUT/$name.log.w1" || fail "$name: W=1's error does not name the cap: $(tail -2 "$OUT/$name.log.w1")"
  grep -q "RESOURCE_EXHAUSTED; exit 2" "$OUT/$name.log.w1" || fail "$name: W=1's error is not RESOURCE_EXHAUSTED"
  tail -1 "$OUT/$name.log.w1" >&2
}

# --- 1. W = 4 FULL_SHARD under the cap ----------------------------------------------------------
run_w4 gpt "$SPEC" "${SETS[@]}"
grep -q "GPT 24x256" "$OUT/gpt.log.0" || fail "rank 0 did not log the model"

# --- 2. W = 1 under the same cap: a clear out-of-memory error -----------------------------------
run_w1 gpt "$SPEC" "${SETS[@]}"

# --- 2b. A TorchScript file of the same size, per block: the same two outcomes ------------------
# 24 blocks of 256 channels (make_blocks_lm.py's BlocksLm, a tied head): 19.0M parameters.
BIG="$OUT/big_blocks_lm.pt"
"$VENV_PYTHON" "$MAKE_BLOCKS" --out "$BIG" --dim 256 --layers 24
SCRIPTED="$OUT/scripted.yaml"
cat >"$SCRIPTED" <<YAML
name: scripted-memory
world_size: 4
model: {architecture: TORCHSCRIPT, torchscript_path: $BIG, vocab_size: 256, block_size: 64}
data: {path: $DATA, seq_len: 32, shuffle_seed: 3}
optimizer: {kind: SGD, lr: 1.0e-3, momentum: 0, weight_decay: 0, warmup_steps: 0}
fsdp: {sharding_strategy: FULL_SHARD, block_class: Block, collective_timeout_s: 120,
       activation_checkpointing: true}
train: {steps: 2, global_batch_size: 4, micro_batch_size: 1, log_every: 1, eval_every: 0,
        sample_tokens: 0}
device: {kind: CPU, cpu_threads: 1}
YAML
run_w4 scripted "$SCRIPTED"
grep -q "parameters read from the file shard by shard" "$OUT/scripted.log.0" ||
  fail "scripted: rank 0 did not read its parameters shard by shard: $(grep -m1 TorchScript "$OUT/scripted.log.0")"
run_w1 scripted "$SCRIPTED"

# --- 3. A malformed cap is a bad environment ----------------------------------------------------
code=0
SHARDLINE_CPU_MEMORY_CAP_MIB=lots "$TRAINER" --spec "$SPEC" "${SETS[@]}" \
  --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
  >"$OUT/out.bad" 2>"$OUT/log.bad" || code=$?
[[ $code -eq 2 ]] || fail "a malformed cap exited $code, want 2"
grep -qF 'environment SHARDLINE_CPU_MEMORY_CAP_MIB="lots" is not a positive number of MiB' "$OUT/log.bad" ||
  fail "the malformed cap's error: $(tail -1 "$OUT/log.bad")"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"
