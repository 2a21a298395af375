#!/usr/bin/env bash
# The trainer binary with checkpoints: W = 2 FULL_SHARD saves asynchronously every 4 steps
# (keep_last 2); a W = 1 run resumed from step 4 (spec resume_step) and a W = 2 run resumed
# through SHARDLINE_RESUME_STEP (overriding resume_step 0) log the same losses for steps 5..8 as
# the uninterrupted run (1e-4 relative: W changes the accumulation order; the strict 1e-5
# reshard parity is sharded_checkpoint_test's); a SHARDLINE_RESUME_STEP that is not committed
# falls back to the newest committed step, or fails naming it when there is none;
# init_from_safetensors starts from given weights.
#   $1: the trainer binary   $2: the free-port helper   $3: checkpoint_export
set -euo pipefail
TRAINER="$(realpath "$1")"
FREE_PORT="$(realpath "$2")"
EXPORT="$(realpath "$3")"
SPEC="examples/tiny_gpt_shakespeare.yaml"
OUT="${TEST_TMPDIR:-$(mktemp -d)}"
CKPT="$OUT/ckpt"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
source trainer/testing/ranks.sh  # run_ranks
COMMON=(--set train.steps=8 --set train.log_every=1 --set train.eval_every=0
        --set train.eval_batches=1 --set train.sample_tokens=0 --set optimizer.warmup_steps=2
        --set fsdp.collective_timeout_s=60 --set checkpoint.dir="$CKPT"
        --set checkpoint.every_steps=0 --set checkpoint.save_final=false)

run_w2() {  # $1: metrics prefix; rest: extra args
  local prefix="$1"; shift
  run_ranks "$prefix" 2 "$OUT/$prefix.out.{r}" "$OUT/$prefix.log.{r}" -- \
    --spec "$SPEC" --set fsdp.sharding_strategy=FULL_SHARD --set fsdp.hybrid_shard_degree=0 \
    "${COMMON[@]}" "$@" --metrics_out "$OUT/$prefix.{r}.jsonl"
}
losses() { grep -o '"step": [0-9]*, "loss": [0-9.e+-]*' "$1" | sed 's/"step": //; s/, "loss": / /'; }
compare() {  # $1 $2: metrics files; steps of $2 must match $1
  join <(losses "$1") <(losses "$2") |
    awk 'BEGIN { n = 0 } { n++; d = $2 - $3; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1 }
         END { exit bad || n != 4 }' ||
    fail "losses differ: $(losses "$1" | tr '\n' ' ') vs $(losses "$2" | tr '\n' ' ')"
}

# --- 1. uninterrupted W = 2 run saving asynchronously at steps 4 and 8 -------------------------
run_w2 ref --set checkpoint.every_steps=4 --set checkpoint.keep_last=2 --set checkpoint.async_save=true
[[ -f "$CKPT/step_4/MANIFEST.json" && -f "$CKPT/step_8/MANIFEST.json" ]] || fail "no step_4/step_8 manifests: $(ls -R "$CKPT")"
[[ -f "$CKPT/step_8/shard_00000.bin" && -f "$CKPT/step_8/shard_00001.bin" ]] || fail "step_8 lacks a shard file"
grep -q '"step": "8"' "$CKPT/step_8/MANIFEST.json" || fail "step_8 manifest has no step 8"
grep -q '"data_position"' "$CKPT/step_8/MANIFEST.json" || fail "manifest has no data cursor"
[[ $(losses "$OUT/ref.0.jsonl" | wc -l) -eq 8 ]] || fail "reference run logged $(losses "$OUT/ref.0.jsonl" | wc -l) steps"

# --- 2. W = 1 resumed from step 4 by the spec ----------------------------------------------------
"$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
  "${COMMON[@]}" --set checkpoint.resume_step=4 --set checkpoint.save_final=true \
  --metrics_out "$OUT/w1.jsonl" \
  >/dev/null 2>"$OUT/w1.log" || { fail "W=1 resume failed"; tail -20 "$OUT/w1.log" >&2; }
grep -q "resumed from $CKPT/step_4" "$OUT/w1.log" || fail "W=1 did not log the resume"
compare "$OUT/ref.0.jsonl" "$OUT/w1.jsonl"
# Its final save replaced the committed step 8 (un-committed first): a valid W = 1 checkpoint.
grep -q '"world_size": 1' "$CKPT/step_8/MANIFEST.json" || fail "step_8 was not re-saved by the W=1 run"
"$EXPORT" "$CKPT" 8 "$OUT/w8.safetensors" || fail "the re-saved step 8 does not verify"

# --- 2b. W = 1 continuing the W = 2 run's step 4 (checkpoint.resume_from) in its own directory --
"$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
  "${COMMON[@]}" --set checkpoint.dir="$OUT/cont" --set checkpoint.resume_from="$CKPT/step_4/" \
  --set checkpoint.save_final=true --metrics_out "$OUT/cont.jsonl" \
  >/dev/null 2>"$OUT/cont.log" || { fail "W=1 continuing step 4 failed"; tail -20 "$OUT/cont.log" >&2; }
grep -q "continued from $CKPT/step_4 (step 4" "$OUT/cont.log" || fail "W=1 did not log where it continued from"
compare "$OUT/ref.0.jsonl" "$OUT/cont.jsonl"
[[ -f "$OUT/cont/step_8/MANIFEST.json" ]] || fail "the continuing run saved no step 8 of its own"
# A checkpoint root continues from its newest committed step: 8 of 8, nothing left to train.
if "$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
  "${COMMON[@]}" --set checkpoint.dir="$OUT/cont2" --set checkpoint.resume_from="$CKPT" \
  >/dev/null 2>"$OUT/cont2.log"; then
  fail "continuing a finished run's newest step trained"
fi
grep -q "checkpoint.resume_from $CKPT: its step 8 is not below train.steps 8" "$OUT/cont2.log" ||
  fail "no error naming checkpoint.resume_from: $(tail -3 "$OUT/cont2.log")"

# --- 2c. under the coordinator, only what its registry recorded is resumed (#31 item 3) ----------
# SHARDLINE_RESUME_STEP=0: the registry holds no committed checkpoint of this job, so the committed
# steps in its directory (planted ones, as far as the coordinator knows) are not loaded: all 8
# steps train from scratch.
SHARDLINE_RESUME_STEP=0 "$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD \
  --set fsdp.hybrid_shard_degree=0 "${COMMON[@]}" --metrics_out "$OUT/fresh.jsonl" \
  >/dev/null 2>"$OUT/fresh.log" || { fail "RESUME_STEP=0 run failed"; tail -20 "$OUT/fresh.log" >&2; }
! grep -q "resumed from" "$OUT/fresh.log" || fail "RESUME_STEP=0 resumed a checkpoint of its directory"
[[ $(losses "$OUT/fresh.jsonl" | wc -l) -eq 8 ]] || fail "RESUME_STEP=0 trained $(losses "$OUT/fresh.jsonl" | wc -l) steps, not 8"
# A malformed value is refused naming the variable (it used to be ignored).
if SHARDLINE_RESUME_STEP=4x "$TRAINER" --spec "$SPEC" "${COMMON[@]}" >/dev/null 2>"$OUT/badenv.log"; then
  fail "SHARDLINE_RESUME_STEP=4x was accepted"
fi
grep -q 'environment SHARDLINE_RESUME_STEP="4x" is not an integer' "$OUT/badenv.log" ||
  fail "no error naming SHARDLINE_RESUME_STEP: $(tail -3 "$OUT/badenv.log")"
# checkpoint.resume_from whose manifest names another job than the one the coordinator approved.
if SHARDLINE_RESUME_FROM_JOB=job-approved "$TRAINER" --spec "$SPEC" \
  --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 "${COMMON[@]}" \
  --set checkpoint.dir="$OUT/cont3" --set checkpoint.resume_from="$CKPT/step_4" \
  >/dev/null 2>"$OUT/cont3.log"; then
  fail "a checkpoint of another job than the approved one was continued"
fi
grep -q "belongs to job (none named), not to job job-approved, whose checkpoint the coordinator approved" \
  "$OUT/cont3.log" || fail "no error naming the approved job: $(tail -3 "$OUT/cont3.log")"

# --- 3. W = 2 resumed by SHARDLINE_RESUME_STEP (the daemon's), overriding resume_step 0 ---------
SHARDLINE_RESUME_STEP=4 run_w2 env --set checkpoint.resume_step=0
compare "$OUT/ref.0.jsonl" "$OUT/env.0.jsonl"

# --- 4. a step that is not committed fails with a data error (exit 3) naming it ------------------
code=0
"$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 "${COMMON[@]}" \
  --set checkpoint.resume_step=5 >/dev/null 2>"$OUT/bad.log" || code=$?
[[ $code -eq 3 ]] || fail "resume of a missing step exited $code, want 3"
grep -q "step_5" "$OUT/bad.log" || fail "missing-step error does not name step_5: $(tail -2 "$OUT/bad.log")"

# --- 4b. the coordinator's resume step missing on disk: the newest committed one (step 8) -------
# (SHARDLINE_RESUME_STEP differs from the spec's resume_step, so it is the registry's step.)
SHARDLINE_RESUME_STEP=12 "$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD \
  --set fsdp.hybrid_shard_degree=0 "${COMMON[@]}" >/dev/null 2>"$OUT/fallback.log" ||
  { fail "fallback resume failed"; tail -20 "$OUT/fallback.log" >&2; }
grep -q "resume step 12 from the coordinator is not a committed checkpoint on disk" "$OUT/fallback.log" ||
  fail "no fallback warning: $(tail -3 "$OUT/fallback.log")"
grep -q "falling back to step 8, the newest committed checkpoint under $CKPT" "$OUT/fallback.log" ||
  fail "fallback did not pick step 8: $(tail -3 "$OUT/fallback.log")"
grep -q "resumed from $CKPT/step_8" "$OUT/fallback.log" || fail "fallback did not resume step 8"

# --- 4c. ... and with nothing committed there: a data error naming the directory and step ------
mkdir -p "$OUT/empty"
code=0
SHARDLINE_RESUME_STEP=12 "$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD \
  --set fsdp.hybrid_shard_degree=0 "${COMMON[@]}" --set checkpoint.dir="$OUT/empty" \
  >/dev/null 2>"$OUT/empty.log" || code=$?
[[ $code -eq 3 ]] || fail "resume step missing with nothing committed exited $code, want 3"
grep -q "resume step 12 from the coordinator: $OUT/empty/step_12 is not a committed checkpoint, and no committed checkpoint is under $OUT/empty; not starting from scratch" "$OUT/empty.log" ||
  fail "no clear error for nothing committed: $(tail -2 "$OUT/empty.log")"

# --- 5. init_from_safetensors: the step-4 weights give step 5's loss of the reference run -------
"$EXPORT" "$CKPT" 4 "$OUT/w4.safetensors" || fail "export failed"
"$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
  "${COMMON[@]}" --set checkpoint.dir="" --set checkpoint.init_from_safetensors="$OUT/w4.safetensors" \
  --set train.steps=1 --metrics_out "$OUT/init.jsonl" >/dev/null 2>"$OUT/init.log" ||
  { fail "init_from_safetensors run failed"; tail -20 "$OUT/init.log" >&2; }
grep -q "initialized the weights from" "$OUT/init.log" || fail "no init log line"
# Trained weights start well below the random initialization's first loss.
init_loss=$(losses "$OUT/init.jsonl" | head -1 | cut -d' ' -f2)
ref_first=$(losses "$OUT/ref.0.jsonl" | head -1 | cut -d' ' -f2)
awk -v a="$init_loss" -v b="$ref_first" 'BEGIN { exit !(a < b - 0.1) }' ||
  fail "init_from_safetensors loss $init_loss is not below the fresh start's $ref_first"

if [[ $failures -ne 0 ]]; then echo "$failures failure(s)"; exit 1; fi
echo "trainer checkpoint tests passed"
