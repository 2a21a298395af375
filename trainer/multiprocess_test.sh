#!/usr/bin/env bash
# Four trainer processes started from a shell loop with torchrun-style variables train the
# example spec (tiny GPT, HYBRID_SHARD degree 2 => W = 4 = 2 replicas x 2 shards) and write
# metrics, agreeing with a single-process run of the same spec; then the exit codes of a bad
# spec, bad data, a missing peer, a peer killed mid-training, a peer killed while the survivor
# samples and a signal.
#   $1: the trainer binary   $2: the free-port helper
set -euo pipefail
TRAINER="$(realpath "$1")"
FREE_PORT="$(realpath "$2")"
SPEC="examples/tiny_gpt_shakespeare.yaml"
OUT="${TEST_TMPDIR:-$(mktemp -d)}"
export OMP_NUM_THREADS=1
# Every rank of a launch shares the bootstrap store's secret (the trainer refuses to run without).
export SHARDLINE_STORE_SECRET="test-secret-$$"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
source trainer/testing/ranks.sh  # run_ranks

# --- 1. four ranks, HYBRID_SHARD degree 2 -------------------------------------------------------
run_ranks "HYBRID_SHARD(2)" 4 "$OUT/out.{r}" "$OUT/log.{r}" -- \
  --spec "$SPEC" --set train.steps=12 --set train.eval_every=6 \
  --set train.log_every=3 --set train.sample_tokens=20 --set fsdp.collective_timeout_s=60 \
  --metrics_out "$OUT/metrics.{r}.jsonl"
grep -q "W=4 (R=2 x S=2) HYBRID_SHARD" "$OUT/log.0" || fail "rank 0 did not log the HYBRID_SHARD layout"
for r in 0 1 2 3; do
  lines=$(grep -c '"step": ' "$OUT/metrics.$r.jsonl" || true)
  [[ $lines -eq 4 ]] || fail "rank $r wrote $lines metrics lines, want 4 (steps 3, 6, 9, 12)"
  grep -q '"step": 12, "loss": ' "$OUT/metrics.$r.jsonl" || fail "rank $r has no step 12 loss"
  grep -q '"val_loss": ' "$OUT/metrics.$r.jsonl" || fail "rank $r has no val_loss"
done
# Every rank logs the global mean loss: the four files agree step by step.
losses() { grep -o '"loss": [0-9.e+-]*' "$1"; }
for r in 1 2 3; do
  [[ "$(losses "$OUT/metrics.0.jsonl")" == "$(losses "$OUT/metrics.$r.jsonl")" ]] ||
    fail "rank $r's losses differ from rank 0's"
done
first=$(losses "$OUT/metrics.0.jsonl" | head -1 | cut -d' ' -f2)
last=$(losses "$OUT/metrics.0.jsonl" | tail -1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' ||
  fail "loss did not fall: first $first, last $last"
grep -q "^ROMEO:" "$OUT/out.0" || fail "rank 0 printed no sample"

# The same spec at W = 1 (4 accumulated micro-batches instead of 4 ranks) reads the same global
# batches, so it logs the same training losses (up to float summation order).
"$TRAINER" --spec "$SPEC" --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 \
  --set train.steps=12 --set train.eval_every=6 --set train.log_every=3 \
  --metrics_out "$OUT/metrics.w1.jsonl" >/dev/null 2>"$OUT/log.w1" || fail "W=1 run failed"
paste <(losses "$OUT/metrics.0.jsonl" | cut -d' ' -f2) <(losses "$OUT/metrics.w1.jsonl" | cut -d' ' -f2) |
  awk 'NF != 2 || ($1 - $2 > 1e-3 || $2 - $1 > 1e-3) { bad = 1 } END { exit bad || NR != 4 }' ||
  fail "W=4 losses differ from W=1: $(losses "$OUT/metrics.0.jsonl" | tr '\n' ' ') vs $(losses "$OUT/metrics.w1.jsonl" | tr '\n' ' ')"
grep -q '"sample": "ROMEO:' "$OUT/metrics.0.jsonl" || fail "rank 0's last metrics line has no sample"
! grep -q "^ROMEO:" "$OUT/out.1" || fail "rank 1 printed a sample"

# --- 2. exit codes ------------------------------------------------------------------------------
expect_exit() {  # expect_exit CODE TEXT LOG -- command...
  local want=$1 text=$2 log=$3
  shift 4
  local code=0
  "$@" >"$log.out" 2>"$log" || code=$?
  [[ $code -eq $want ]] || { fail "$log: exit $code, want $want"; tail -5 "$log" >&2; }
  grep -qF -- "$text" "$log" || { fail "$log: stderr lacks \"$text\""; tail -5 "$log" >&2; }
}
ONE=(--set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0)
expect_exit 2 "fsdp.hybrid_shard_degree: 3 does not divide world_size 4" "$OUT/badspec" -- \
  env RANK=0 WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
  "$TRAINER" --spec "$SPEC" --set fsdp.hybrid_shard_degree=3
expect_exit 2 'unknown field "train.stepz" (did you mean "steps"?)' "$OUT/badfield" -- \
  "$TRAINER" --spec "$SPEC" "${ONE[@]}" --set train.stepz=3
printf 'too short' >"$OUT/tiny.txt"
expect_exit 3 "hold no sequence of data.seq_len 64 + 1" "$OUT/baddata" -- \
  "$TRAINER" --spec "$SPEC" "${ONE[@]}" --set "data.path=$OUT/tiny.txt"
# Rank 0 of two, whose peer never comes: the rendezvous times out.
expect_exit 4 "DEADLINE_EXCEEDED" "$OUT/nopeer" -- \
  env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$("$FREE_PORT")" \
  "$TRAINER" --spec "$SPEC" --set fsdp.hybrid_shard_degree=2 --set fsdp.collective_timeout_s=3
# The TCP store needs the launcher's shared secret, off loopback and on (docs/security.md).
expect_exit 2 "SHARDLINE_STORE_SECRET is unset" "$OUT/nosecret" -- \
  env -u SHARDLINE_STORE_SECRET RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.255.255.1 MASTER_PORT=1 \
  "$TRAINER" --spec "$SPEC"
expect_exit 2 "is loopback (any local user can reach it) and SHARDLINE_STORE_SECRET is unset" \
  "$OUT/nosecret_local" -- \
  env -u SHARDLINE_STORE_SECRET RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
  "$TRAINER" --spec "$SPEC"
# A rank with another secret is refused by rank 0's store and says why.
PORT="$("$FREE_PORT")"
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT SHARDLINE_STORE_SECRET=right \
  "$TRAINER" --spec "$SPEC" --set fsdp.hybrid_shard_degree=2 --set fsdp.collective_timeout_s=5 \
  >/dev/null 2>"$OUT/secret.0" &
secret_pid=$!
expect_exit 4 "wrong store secret" "$OUT/secret.1" -- \
  env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT SHARDLINE_STORE_SECRET=wrong \
  "$TRAINER" --spec "$SPEC" --set fsdp.hybrid_shard_degree=2 --set fsdp.collective_timeout_s=5
wait "$secret_pid" 2>/dev/null || true
# A peer killed in the middle of training: the survivor fails its next collective and exits 4.
PORT="$("$FREE_PORT")"
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
    "$TRAINER" --spec "$SPEC" --set fsdp.hybrid_shard_degree=2 --set train.steps=100000 \
    --set train.log_every=1 --set fsdp.collective_timeout_s=20 \
    --metrics_out "$OUT/kill.$r.jsonl" >/dev/null 2>"$OUT/kill.$r" &
  kill_pids[$r]=$!
done
for _ in $(seq 1 300); do grep -q '"step": 2,' "$OUT/kill.0.jsonl" 2>/dev/null && break; sleep 0.2; done
kill -KILL "${kill_pids[1]}"
code=0
wait "${kill_pids[0]}" || code=$?
wait "${kill_pids[1]}" 2>/dev/null || true
[[ $code -eq 4 ]] || { fail "peer killed: survivor exit $code, want 4"; tail -5 "$OUT/kill.0" >&2; }
grep -q "exit 4\]" "$OUT/kill.0" || fail "peer killed: no communication error on stderr"

# A peer killed while the survivor samples: rank 1 holds at the start of the final sample
# (SHARDLINE_TEST_PAUSE_IN_SAMPLE, trainer_main.cc), after every collective of the last step, so
# rank 0 is inside its sampling forwards, waiting for rank 1's half of the gather. The lost peer
# must come out as a communication failure (exit 4), not an internal error (exit 1).
PORT="$("$FREE_PORT")"
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
    SHARDLINE_TEST_PAUSE_IN_SAMPLE=1:300 \
    "$TRAINER" --spec "$SPEC" --set fsdp.hybrid_shard_degree=2 --set train.steps=2 \
    --set train.sample_tokens=20 --set fsdp.collective_timeout_s=30 \
    >"$OUT/sample_kill.$r.out" 2>"$OUT/sample_kill.$r" &
  sample_pids[$r]=$!
done
for _ in $(seq 1 600); do
  grep -q "test pause in sample: rank 1" "$OUT/sample_kill.1" 2>/dev/null && break
  sleep 0.2
done
grep -q "test pause in sample: rank 1" "$OUT/sample_kill.1" || fail "sample kill: rank 1 never paused"
sleep 1  # Rank 0 is blocked in its first sampling collective by now.
kill -KILL "${sample_pids[1]}"
code=0
wait "${sample_pids[0]}" || code=$?
wait "${sample_pids[1]}" 2>/dev/null || true
[[ $code -eq 4 ]] || { fail "peer killed in sampling: survivor exit $code, want 4"; tail -5 "$OUT/sample_kill.0" >&2; }
grep -q "exit 4\]" "$OUT/sample_kill.0" || fail "peer killed in sampling: no communication error on stderr"
! grep -q "^ROMEO:" "$OUT/sample_kill.0.out" || fail "peer killed in sampling: rank 0 printed a sample"
# A malformed hook is refused like a bad environment.
expect_exit 2 "SHARDLINE_TEST_PAUSE_IN_SAMPLE=1: expected RANK:SECONDS" "$OUT/badpause" -- \
  env SHARDLINE_TEST_PAUSE_IN_SAMPLE=1 "$TRAINER" --spec "$SPEC" "${ONE[@]}"

# SIGTERM between steps: exit 128 + 15.
"$TRAINER" --spec "$SPEC" "${ONE[@]}" --set train.steps=100000 >"$OUT/term.out" 2>"$OUT/term" &
pid=$!
for _ in $(seq 1 100); do grep -q "step " "$OUT/term" 2>/dev/null && break; sleep 0.2; done
sleep 0.5
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
[[ $code -eq 143 ]] || fail "SIGTERM: exit $code, want 143"
grep -q "stopped by a signal after step" "$OUT/term" || fail "SIGTERM: no stop message"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all trainer process checks passed"
