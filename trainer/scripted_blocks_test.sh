#!/usr/bin/env bash
# A scripted model that is not one of ours (models/testdata/make_blocks_lm.py: a ModuleList of
# Blocks taking a mask argument, a tied head) sharded per block with fsdp.block_class: Block,
# in real trainer processes on loopback (Gloo):
#   - W = 4 FULL_SHARD, HYBRID_SHARD(2), FULL_SHARD with activation checkpointing, and PER_LAYER
#     with forward prefetch log the W = 1 run's per-step losses within 1e-5 relative;
#   - every rank's peak gathered parameter bytes (the trainer's "FSDP memory" line) stay within
#     the root unit plus two blocks, far below the whole model, which the same model without a
#     block class gathers;
#   - a block class the file lacks and a block forward with a non-tensor input fail the trainer
#     at startup (exit 2) with INVALID_ARGUMENT naming the class and method.
#   $1: the trainer binary   $2: the free-port helper   $3: blocks_lm.pt   $4: unsupported_blocks_lm.pt
#   $5: the training text
set -euo pipefail
TRAINER="$(realpath "$1")"
FREE_PORT="$(realpath "$2")"
MODEL="$(realpath "$3")"
UNSUPPORTED="$(realpath "$4")"
DATA="$(realpath "$5")"
OUT="${TEST_TMPDIR:-$(mktemp -d)}"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
source trainer/testing/ranks.sh  # run_ranks

SPEC="$OUT/spec.yaml"
cat >"$SPEC" <<YAML
name: scripted-blocks
world_size: 4
model: {architecture: TORCHSCRIPT, torchscript_path: $MODEL, vocab_size: 256, block_size: 64}
data: {path: $DATA, seq_len: 32, shuffle_seed: 3}
optimizer: {lr: 3.0e-3, warmup_steps: 0}
fsdp: {sharding_strategy: FULL_SHARD, block_class: Block, collective_timeout_s: 60}
train: {steps: 4, global_batch_size: 8, micro_batch_size: 2, log_every: 1, deterministic: true}
device: {kind: CPU, cpu_threads: 1}
YAML

losses() { grep -o '"loss": [0-9.e+-]*' "$1" | cut -d' ' -f2; }

# run_w4 NAME --set ...: four ranks; their metrics in $OUT/NAME.<r>.jsonl, logs in $OUT/NAME.log.<r>.
run_w4() {
  local name=$1
  shift
  run_ranks "$name" 4 "$OUT/$name.out.{r}" "$OUT/$name.log.{r}" -- \
    --spec "$SPEC" "$@" --metrics_out "$OUT/$name.{r}.jsonl"
}

# same_losses NAME: rank 0's losses equal the W = 1 run's within 1e-5 relative, 4 steps.
same_losses() {
  paste <(losses "$OUT/w1.jsonl") <(losses "$OUT/$1.0.jsonl") |
    awk 'function abs(v) { return v < 0 ? -v : v }
         NF != 2 || abs($1 - $2) > 1e-5 * abs($1) { bad = 1 } END { exit bad || NR != 4 }' ||
    fail "$1: losses $(losses "$OUT/$1.0.jsonl" | tr '\n' ' ')differ from W = 1: $(losses "$OUT/w1.jsonl" | tr '\n' ' ')"
}

# peak NAME RANK: the rank's peak gathered parameter bytes.
peak() { grep -o 'peak gathered parameters [0-9]*' "$OUT/$1.log.$2" | awk '{ print $4 }'; }
# unit NAME UNIT: a unit's padded element count from rank 0's memory line.
unit() { grep -o " $2=[0-9]*" "$OUT/$1.log.0" | head -1 | cut -d= -f2; }

# --- 1. W = 1, then W = 4 in four configurations ----------------------------------------------
"$TRAINER" --spec "$SPEC" --set world_size=1 --set fsdp.sharding_strategy=NO_SHARD \
  --metrics_out "$OUT/w1.jsonl" >/dev/null 2>"$OUT/w1.log" || { fail "W=1 run failed"; tail -20 "$OUT/w1.log" >&2; }
grep -q "4 Block blocks as FSDP hook points" "$OUT/w1.log" || fail "W=1: the model did not route its blocks"

run_w4 full
run_w4 hybrid --set fsdp.sharding_strategy=HYBRID_SHARD --set fsdp.hybrid_shard_degree=2
run_w4 checkpointed --set fsdp.activation_checkpointing=true --set train.eval_every=2 \
  --set train.sample_tokens=8
run_w4 per_layer --set fsdp.auto_wrap_policy=PER_LAYER --set fsdp.forward_prefetch=true
run_w4 whole --set fsdp.block_class= --set fsdp.auto_wrap_policy=SIZE_BASED
grep -q "W=4 (R=2 x S=2) HYBRID_SHARD" "$OUT/hybrid.log.0" || fail "hybrid: no HYBRID_SHARD layout"
grep -q "activation checkpointing" "$OUT/checkpointed.log.0" || fail "checkpointed: not on"
for name in full hybrid checkpointed per_layer whole; do same_losses "$name"; done
grep -q '"val_loss": ' "$OUT/checkpointed.0.jsonl" || fail "checkpointed: no val_loss"

# --- 2. peak gathered bytes per rank ---------------------------------------------------------
root=$(unit full root)
block=$(unit full blocks.0)
[[ -n "$root" && -n "$block" ]] || fail "full: no unit sizes in the memory line"
root=${root:-0}
block=${block:-0}
whole_model=$(((root + 4 * block) * 4))
bound=$(((root + 2 * block) * 4))
for name in full hybrid checkpointed per_layer; do
  for r in 0 1 2 3; do
    p=$(peak "$name" "$r")
    [[ -n "$p" ]] || { fail "$name rank $r: no memory line"; continue; }
    ((p <= bound)) || fail "$name rank $r: peak gathered $p bytes > root + two blocks = $bound"
    ((p >= (root + block) * 4)) || fail "$name rank $r: peak gathered $p bytes < root + one block"
    ((p * 10 < whole_model * 6)) || fail "$name rank $r: peak $p is not far below the whole model's $whole_model"
  done
done
# Without hook points the model is gathered whole.
p=$(peak whole 0)
[[ "${p:-0}" -ge "$whole_model" ]] || fail "whole: peak ${p:-none} below the whole model's $whole_model"

# --- 3. refused at startup ---------------------------------------------------------------------
expect_exit() {  # expect_exit CODE TEXT LOG -- command...
  local want=$1 text=$2 log=$3
  shift 4
  local code=0
  "$@" >"$log.out" 2>"$log" || code=$?
  [[ $code -eq $want ]] || { fail "$log: exit $code, want $want"; tail -5 "$log" >&2; }
  grep -qF -- "$text" "$log" || { fail "$log: stderr lacks \"$text\""; tail -5 "$log" >&2; }
}
ONE=(--set world_size=1 --set fsdp.sharding_strategy=NO_SHARD)
expect_exit 2 'fsdp.block_class: no submodule of the TorchScript model has class "Blok"' \
  "$OUT/missing_class" -- "$TRAINER" --spec "$SPEC" "${ONE[@]}" --set fsdp.block_class=Blok
grep -qF "INVALID_ARGUMENT; exit 2" "$OUT/missing_class" || fail "missing_class: not INVALID_ARGUMENT"
expect_exit 2 'fsdp.block_class: ScaledBlock.forward takes "scale: float"' "$OUT/non_tensor" -- \
  "$TRAINER" --spec "$SPEC" "${ONE[@]}" --set "model.torchscript_path=$UNSUPPORTED" \
  --set fsdp.block_class=ScaledBlock

if ((failures)); then
  echo "$failures failure(s); logs in $OUT" >&2
  exit 1
fi
echo "PASS"
