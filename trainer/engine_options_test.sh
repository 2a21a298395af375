#!/usr/bin/env bash
# The engine's performance options in real two-process trainer runs (FULL_SHARD, prefetch):
# - fsdp.fake_collectives: the ranks rendezvous and bootstrap for real, train through the no-op
#   shard/replicate communicators and finish; their losses are not a real run's (a fake
#   all-gather repeats the rank's own shard), which shows the collectives really were replaced;
# - fsdp.activation_checkpointing: the same losses as without, to the last digit printed;
# - fsdp.mixed_precision BF16 (param, buffer; FP32 reduce): within 1% of the float32 losses
#   (bf16 keeps 8 significant bits; the engine tests measure ~0.2% on their model), and not equal
#   to them;
# - fsdp.mixed_precision FP16 (param, buffer, reduce; dynamic loss scaling) on this CPU job: the
#   loss falls, within 0.1% of the float32 losses (fp16 keeps 11 significant bits; measured
#   2.5e-5 over 8 steps), and not equal to them.
#   $1: the trainer binary   $2: the free-port helper
set -euo pipefail
TRAINER="$(realpath "$1")"
FREE_PORT="$(realpath "$2")"
SPEC="examples/tiny_gpt_shakespeare.yaml"
OUT="${TEST_TMPDIR:-$(mktemp -d)}"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
source trainer/testing/ranks.sh  # run_ranks

run_w2() {  # run_w2 NAME --set ...
  local name=$1
  shift
  run_ranks "$name" 2 /dev/null "$OUT/$name.log.{r}" -- \
    --spec "$SPEC" --set fsdp.sharding_strategy=FULL_SHARD \
    --set fsdp.hybrid_shard_degree=0 --set fsdp.forward_prefetch=true \
    --set fsdp.backward_prefetch=BACKWARD_PRE --set train.steps=4 --set train.log_every=1 \
    --set train.eval_every=0 --set train.sample_tokens=0 --set fsdp.collective_timeout_s=60 \
    "$@" --metrics_out "$OUT/$name.{r}.jsonl"
}
losses() { grep -o '"loss": [0-9.e+-]*' "$1" | cut -d' ' -f2; }

run_w2 fake --set fsdp.fake_collectives=true
grep -q "FULL_SHARD, .* units, sharded AdamW, fake collectives" "$OUT/fake.log.0" ||
  fail "rank 0 did not log that its collectives are fake"
for r in 0 1; do
  [[ $(losses "$OUT/fake.$r.jsonl" | wc -l) -eq 4 ]] || fail "fake rank $r: want 4 losses"
  losses "$OUT/fake.$r.jsonl" | awk '$1 + 0 != $1 + 0 || $1 <= 0 || $1 > 10 { bad = 1 } END { exit bad }' ||
    fail "fake rank $r: losses not finite and plausible: $(losses "$OUT/fake.$r.jsonl" | tr '\n' ' ')"
done

run_w2 real
! grep -q "fake collectives" "$OUT/real.log.0" || fail "the real run logged fake collectives"
# A fake all-gather fills every chunk with the rank's own shard, so even step 1 computes with
# other weights than the real run; equal losses would mean nothing was faked.
[[ "$(losses "$OUT/fake.0.jsonl" | head -1)" != "$(losses "$OUT/real.0.jsonl" | head -1)" ]] ||
  fail "step 1 loss with fake collectives equals the real run's: nothing was faked"
[[ $(losses "$OUT/real.0.jsonl" | wc -l) -eq 4 ]] || fail "real run: want 4 losses"

run_w2 ac --set fsdp.activation_checkpointing=true --set model.dropout=0.1
run_w2 noac --set model.dropout=0.1
grep -q "units, sharded AdamW, activation checkpointing" "$OUT/ac.log.0" ||
  fail "rank 0 did not log activation checkpointing"
[[ $(losses "$OUT/ac.0.jsonl" | wc -l) -eq 4 ]] || fail "checkpointed run: want 4 losses"
[[ "$(losses "$OUT/ac.0.jsonl")" == "$(losses "$OUT/noac.0.jsonl")" ]] ||
  fail "activation checkpointing changed the losses: $(losses "$OUT/ac.0.jsonl" | tr '\n' ' ') vs $(losses "$OUT/noac.0.jsonl" | tr '\n' ' ')"

# $1: run label (bf16, fp16); $2: relative tolerance; $3: it in words. The run's 4 losses are
# within the tolerance of the fp32 run's, and not equal to them (it did compute in $1).
expect_near_fp32() {
  paste <(losses "$OUT/$1.0.jsonl") <(losses "$OUT/real.0.jsonl") |
    awk -v tol="$2" 'NF != 2 { bad = 1 } { d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > tol) bad = 1 }
         END { exit bad || NR != 4 }' ||
    fail "$1 losses not within $3 of fp32: $(losses "$OUT/$1.0.jsonl" | tr '\n' ' ') vs $(losses "$OUT/real.0.jsonl" | tr '\n' ' ')"
  [[ "$(losses "$OUT/$1.0.jsonl")" != "$(losses "$OUT/real.0.jsonl")" ]] ||
    fail "$1 losses equal fp32's: mixed precision did not compute in $1"
}

run_w2 bf16 --set fsdp.mixed_precision.param_dtype=BF16 \
  --set fsdp.mixed_precision.buffer_dtype=BF16 --set fsdp.mixed_precision.reduce_dtype=FP32
[[ $(losses "$OUT/bf16.0.jsonl" | wc -l) -eq 4 ]] || fail "bf16 run: want 4 losses"
expect_near_fp32 bf16 1e-2 "1%"
run_w2 fp16 --set fsdp.mixed_precision.param_dtype=FP16 \
  --set fsdp.mixed_precision.buffer_dtype=FP16 --set fsdp.mixed_precision.reduce_dtype=FP16
[[ $(losses "$OUT/fp16.0.jsonl" | wc -l) -eq 4 ]] || fail "fp16 run: want 4 losses"
losses "$OUT/fp16.0.jsonl" | awk 'NR == 1 { first = $1 } { last = $1 } END { exit !(last < first) }' ||
  fail "fp16 loss did not fall: $(losses "$OUT/fp16.0.jsonl" | tr '\n' ' ')"
expect_near_fp32 fp16 1e-3 "0.1%"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"
