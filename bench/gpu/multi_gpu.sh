#!/usr/bin/env bash
# The multi-GPU checks, for the day a machine with eight GPUs is available (issue #20 item 6).
# Runs unchanged on a machine with fewer GPUs: every case says how many GPUs it needs, the cases
# that do not fit are listed as SKIPPED with the reason, the rest run.
#
#   bench/gpu/multi_gpu.sh              # run what the GPUs allow; results in $RESULTS
#   bench/gpu/multi_gpu.sh --dry-run    # print the plan (what would run, what would be skipped)
#   MULTI_GPU_NGPU=8 bench/gpu/multi_gpu.sh --dry-run   # the plan for an 8-GPU machine
#
# Cases (N: GPUs needed; W: world size; S: shard degree):
#   launch_torchrun_W{1,2,8}   torchrun-style launch (RANK/LOCAL_RANK/MASTER_*), FULL_SHARD; the job
#                              succeeds and nvidia-smi shows one context per GPU, one GPU per rank.
#   local_rank_beyond_gpus     LOCAL_RANK = number of visible GPUs: the trainer refuses it with the
#                              named error (never two ranks on one GPU).
#   launch_daemon_W{1,2,8}     through shardctl cluster up (coordinator + worker daemon) and a CUDA
#                              job: one context per GPU.
#   daemon_visible_subset      the daemon started with CUDA_VISIBLE_DEVICES naming the last two GPUs
#                              (by UUID): its W = 2 job runs on exactly those two.
#   parity_*                   the loss curve of a CUDA run equals a CPU Gloo run of the same spec
#                              (fp32: 2e-3 relative, bf16: 3e-2): every strategy (FULL_SHARD,
#                              SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2), S = 2 and
#                              4, fp32 and bf16, prefetch variants (forward on, backward PRE, POST,
#                              NONE, limit_all_gathers) and gradient accumulation (2 micro-batches).
#   delay_rank                 rank 1 is stopped (SIGSTOP) for 10 s mid-run, then continued: the
#                              job succeeds with the undelayed run's losses.
#   kill_rank                  rank 1 is killed (SIGKILL) mid-run: every other rank exits non-zero
#                              within collective_timeout_s + 30 s naming the failed collective.
#   stop_rank_offload          rank 1 is stopped for good with cpu_offload and overlap on: the
#                              others end with DEADLINE_EXCEEDED within collective_timeout_s + 30 s.
#   hsdp_vs_fsdp2              GPT-2 small, bf16, HYBRID_SHARD with S = N/2: our median step time
#                              against PyTorch FSDP2's HSDP (bench/gpu/torch_fsdp2_gpt2.py --mode
#                              hsdp) on the same GPUs.
# One-GPU coverage of S > 1 without NCCL peers is in //fsdp/tests:standin_parity_gpu_test (run by
# bench/gpu/run_all.sh).
#
# Environment: BIN (binaries: .gpu/bin, else bazel-bin paths), TORCH_VENV (/opt/torch/.venv),
# WORK (bench/gpu/out/multi_gpu), RESULTS (bench/gpu/results_multi_gpu.txt), MULTI_GPU_NGPU
# (default: nvidia-smi -L), MULTI_GPU_ONLY (a regular expression: run only the matching cases),
# MULTI_GPU_STEPS (20).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 2

DRY_RUN=0
for arg in "$@"; do
  case $arg in
    --dry-run | -n) DRY_RUN=1 ;;
    -h | --help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

WORK=${WORK:-$REPO/bench/gpu/out/multi_gpu}
RESULTS=${RESULTS:-$REPO/bench/gpu/results_multi_gpu.txt}
TORCH_VENV=${TORCH_VENV:-/opt/torch/.venv}
STEPS=${MULTI_GPU_STEPS:-20}
ONLY=${MULTI_GPU_ONLY:-}
SPEC=examples/tiny_gpt_shakespeare.yaml
if [ -z "${BIN:-}" ]; then
  if [ -x "$REPO/.gpu/bin/trainer" ]; then BIN=$REPO/.gpu/bin; else BIN=; fi
fi
bin_path() {  # $1: name (trainer, worker, coordinator, shardctl) -> its path
  if [ -n "$BIN" ]; then echo "$BIN/$1"; return; fi
  case $1 in
    trainer) echo "$REPO/bazel-bin/trainer/trainer" ;;
    shardctl) echo "$REPO/bazel-bin/cli/shardctl" ;;
    *) echo "$REPO/bazel-bin/$1/$1" ;;
  esac
}
TRAINER=$(bin_path trainer)
SHARDCTL=$(bin_path shardctl)
if [ -n "${MULTI_GPU_NGPU:-}" ]; then
  NGPU=$MULTI_GPU_NGPU
elif command -v nvidia-smi > /dev/null 2>&1; then
  NGPU=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
else
  NGPU=0
fi

mkdir -p "$WORK"
PASSED=0
FAILED=0
SKIPPED=0
: > "$WORK/cases.txt"
note() { echo "$*" | tee -a "$WORK/cases.txt"; }
log() { echo "[multi_gpu $(date -u +%H:%M:%S)] $*" >&2; }

# case NAME GPUS DESCRIPTION FUNCTION [ARGS...]: runs FUNCTION ARGS (exit 0: passed) when NGPU >= GPUS
# and NAME matches MULTI_GPU_ONLY; in a dry run prints the plan line instead.
case_() {
  local name=$1 need=$2 what=$3
  shift 3
  if [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]]; then return; fi
  if [ "$NGPU" -lt "$need" ]; then
    SKIPPED=$((SKIPPED + 1))
    note "SKIP $name: needs $need GPU(s), this machine has $NGPU ($what)"
    return
  fi
  if [ "$DRY_RUN" = 1 ]; then
    note "RUN  $name [$need GPU(s)]: $what"
    return
  fi
  log "$name: $what"
  local dir=$WORK/$name rc=0
  rm -rf "$dir" && mkdir -p "$dir"
  CASE_DIR=$dir "$@" > "$dir/case.log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    PASSED=$((PASSED + 1))
    note "PASS $name: $what$(tail -1 "$dir/case.log" | sed -n 's/^RESULT /: /p')"
  else
    FAILED=$((FAILED + 1))
    note "FAIL $name (exit $rc): $what: $(grep -v '^RESULT ' "$dir/case.log" | tail -3 | tr '\n' ' ' | cut -c1-300)"
  fi
}

# ---- helpers (run inside a case: CASE_DIR is its directory) ------------------------------------
PORT=29600
next_port() { PORT=$((PORT + 7)); echo "$PORT"; }

# Common spec settings for W ranks: micro-batch 4, `accum` micro-batches per step.
spec_args() {  # $1: W, $2: accumulation
  echo "--spec $SPEC --set world_size=$1 --set train.steps=$STEPS --set train.log_every=1"
  echo "--set train.eval_every=0 --set train.sample_tokens=0 --set train.micro_batch_size=4"
  echo "--set train.global_batch_size=$(($1 * 4 * $2)) --set fsdp.collective_timeout_s=60"
}

# Starts W torchrun-style ranks in the background; their pids in RANK_PIDS.
# $1: W, $2: run name (files $CASE_DIR/<name>.r<rank>.{log,jsonl}), rest: trainer arguments.
start_ranks() {
  local w=$1 name=$2 port r
  shift 2
  port=$(next_port)
  RANK_PIDS=()
  for ((r = 0; r < w; r++)); do
    RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r LOCAL_WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port SHARDLINE_STORE_SECRET="gpu-$port-$$" "$TRAINER" "$@" --metrics_out "$CASE_DIR/$name.r$r.jsonl" \
      > "$CASE_DIR/$name.r$r.log" 2>&1 &
    RANK_PIDS+=($!)
  done
}
wait_ranks() {  # -> 0 when every rank in RANK_PIDS exited 0
  local bad=0 p
  for p in "${RANK_PIDS[@]}"; do wait "$p" || bad=1; done
  return $bad
}
run_ranks() {  # as start_ranks, then waits (at most 300 s)
  start_ranks "$@"
  local watchdog
  (sleep 300 && kill -9 "${RANK_PIDS[@]}" 2> /dev/null) &
  watchdog=$!
  wait_ranks
  local rc=$?
  kill "$watchdog" 2> /dev/null
  return $rc
}
losses() { grep -o '"step": [0-9]*, "loss": [0-9.e+-]*' "$1" | sed 's/"step": //; s/, "loss": / /'; }
compare_losses() {  # $1 $2: metrics files, $3: relative tolerance
  local n
  n=$(join <(losses "$1" | sort -k1,1) <(losses "$2" | sort -k1,1) |
    awk -v tol="$3" '{ n++; d = $2 - $3; if (d < 0) d = -d; if (d > tol * $2) bad = 1 }
                     END { if (bad) print "bad"; else print n + 0 }')
  if [ "$n" = bad ] || [ "$n" -lt "$STEPS" ]; then
    echo "losses differ ($1 vs $2, tolerance $3): $(losses "$1" | tr '\n' ' ') vs $(losses "$2" | tr '\n' ' ')"
    return 1
  fi
  echo "RESULT $n steps within $3"
}
# One compute context per GPU and one GPU per rank: samples nvidia-smi while `pids` run.
check_contexts() {  # $1: expected number of GPUs, rest: pids
  local want=$1 seen gpus per_gpu
  shift
  for _ in $(seq 60); do
    seen=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader 2> /dev/null |
      tr -d ' ' | grep -E "^($(echo "$@" | tr ' ' '|')),")
    [ "$(echo "$seen" | grep -c ,)" -ge "$want" ] && break
    sleep 1
  done
  gpus=$(echo "$seen" | cut -d, -f2 | sort -u | grep -c .)
  per_gpu=$(echo "$seen" | cut -d, -f2 | sort | uniq -c | awk '$1 > 1' | grep -c .)
  echo "contexts: $(echo "$seen" | tr '\n' ' ')"
  if [ "$gpus" != "$want" ] || [ "$per_gpu" != 0 ] ||
    [ "$(echo "$seen" | cut -d, -f1 | sort | uniq -d | grep -c .)" != 0 ]; then
    echo "expected $want GPUs with one context each, one GPU per rank"
    return 1
  fi
}

# ---- cases -------------------------------------------------------------------------------------
launch_torchrun() {  # $1: W
  # shellcheck disable=SC2046  # spec_args is a list of words
  start_ranks "$1" run $(spec_args "$1" 1) --set device.kind=CUDA \
    --set fsdp.sharding_strategy=FULL_SHARD --set fsdp.hybrid_shard_degree=0
  check_contexts "$1" "${RANK_PIDS[@]}" || { kill -9 "${RANK_PIDS[@]}"; return 1; }
  wait_ranks || { tail -5 "$CASE_DIR"/run.r*.log; return 1; }
  echo "RESULT $1 ranks on $1 GPUs, final loss $(losses "$CASE_DIR/run.r0.jsonl" | tail -1 | cut -d' ' -f2)"
}

local_rank_beyond() {
  local port
  port=$(next_port)
  # shellcheck disable=SC2046
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=$NGPU MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    SHARDLINE_STORE_SECRET="gpu-$port-$$" "$TRAINER" $(spec_args 2 1) --set device.kind=CUDA > "$CASE_DIR/r1.log" 2>&1 &&
    { echo "the trainer accepted LOCAL_RANK=$NGPU"; return 1; }
  grep -q "LOCAL_RANK $NGPU but this trainer sees only $NGPU CUDA device(s)" "$CASE_DIR/r1.log" ||
    { tail -5 "$CASE_DIR/r1.log"; return 1; }
  echo "RESULT refused: $(grep -m1 -o 'LOCAL_RANK [0-9]* but[^:]*' "$CASE_DIR/r1.log")"
}

launch_daemon() {  # $1: W, $2: CUDA_VISIBLE_DEVICES for the daemon ("" : inherit nothing)
  local w=$1 visible=$2 state=$CASE_DIR/cluster job pids
  ctl() { timeout 60 "$SHARDCTL" "$@" --state_dir="$state"; }
  if [ -n "$visible" ]; then
    CUDA_VISIBLE_DEVICES=$visible ctl cluster up --workers=1 --slots=1 || return 1
  else
    env -u CUDA_VISIBLE_DEVICES "$SHARDCTL" cluster up --workers=1 --slots=1 \
      --state_dir="$state" || return 1
  fi
  job=$(ctl submit "$SPEC" --set world_size="$w" --set device.kind=CUDA \
    --set fsdp.sharding_strategy=FULL_SHARD --set fsdp.hybrid_shard_degree=0 \
    --set train.steps=200 --set train.micro_batch_size=4 --set train.global_batch_size=$((w * 4)))
  local rc=0
  for _ in $(seq 60); do
    pids=$(pgrep -f "trainer.*--spec=.*$job" | tr '\n' ' ')
    [ "$(echo "$pids" | wc -w)" -ge "$w" ] && break
    sleep 1
  done
  # shellcheck disable=SC2086  # a list of pids
  check_contexts "$w" $pids || rc=1
  if [ -n "$visible" ]; then  # The ranks' GPUs are the inherited ones.
    local row pid
    while IFS=, read -r pid row; do
      [[ " $pids " == *" $pid "* ]] || continue
      [[ ,$visible, == *,$row,* ]] || { echo "rank pid $pid runs on $row, not in $visible"; rc=1; }
    done < <(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | tr -d ' ')
  fi
  timeout 240 "$SHARDCTL" watch "$job" --state_dir="$state" || rc=1
  ctl status "$job"
  ctl cluster down
  [ $rc = 0 ] && echo "RESULT job $job: $w ranks on $w GPUs"
  return $rc
}

parity() {  # $1: W, $2: accumulation, rest: --set arguments of the variant
  local w=$1 accum=$2 tol=2e-3
  shift 2
  [[ " $* " == *BF16* ]] && tol=3e-2
  # shellcheck disable=SC2046
  run_ranks "$w" cuda $(spec_args "$w" "$accum") --set device.kind=CUDA "$@" ||
    { tail -5 "$CASE_DIR"/cuda.r*.log; return 1; }
  # shellcheck disable=SC2046
  run_ranks "$w" cpu $(spec_args "$w" "$accum") --set device.kind=CPU --set device.cpu_threads=1 \
    "$@" || { tail -5 "$CASE_DIR"/cpu.r*.log; return 1; }
  compare_losses "$CASE_DIR/cpu.r0.jsonl" "$CASE_DIR/cuda.r0.jsonl" "$tol"
}

fault() {  # $1: kind (delay, kill, stop), rest: --set arguments
  local kind=$1 w=2 start t0 elapsed timeout_s=30 steps=5000
  shift
  [ "$kind" = delay ] && steps=2000  # The delayed run finishes; the others never do.
  if [ "$kind" = delay ]; then
    # shellcheck disable=SC2046
    run_ranks "$w" reference $(spec_args "$w" 1) --set device.kind=CUDA \
      --set fsdp.collective_timeout_s=$timeout_s --set train.steps=$steps "$@" || return 1
  fi
  # shellcheck disable=SC2046
  start_ranks "$w" run $(spec_args "$w" 1) --set device.kind=CUDA \
    --set fsdp.collective_timeout_s=$timeout_s --set train.steps=$steps "$@"
  # Mid-run: once rank 0 logged step 5.
  for _ in $(seq 600); do
    grep -q '"step": 5,' "$CASE_DIR/run.r0.jsonl" 2> /dev/null && break
    sleep 0.2
  done
  t0=$(date +%s)
  case $kind in
    delay) kill -STOP "${RANK_PIDS[1]}"; sleep 10; kill -CONT "${RANK_PIDS[1]}" ;;
    kill) kill -9 "${RANK_PIDS[1]}" ;;
    stop) kill -STOP "${RANK_PIDS[1]}" ;;
  esac
  # A rank 0 that never ends (the hang this case checks for) is killed past the bound.
  (sleep $((timeout_s + 90)) && kill -9 "${RANK_PIDS[0]}" 2> /dev/null) &
  local guard=$!
  wait "${RANK_PIDS[0]}"
  start=$?
  kill "$guard" 2> /dev/null
  elapsed=$(($(date +%s) - t0))
  [ "$kind" = stop ] && kill -9 "${RANK_PIDS[1]}" 2> /dev/null
  if [ "$kind" = delay ]; then
    if ! wait "${RANK_PIDS[1]}" || [ "$start" != 0 ]; then
      tail -5 "$CASE_DIR"/run.r*.log
      return 1
    fi
    compare_losses "$CASE_DIR/reference.r0.jsonl" "$CASE_DIR/run.r0.jsonl" 1e-5 > /dev/null ||
      return 1
    echo "RESULT survived a 10 s stall with the reference losses; rank 0 finished ${elapsed}s after it began"
    return 0
  fi
  [ "$start" != 0 ] || { echo "rank 0 succeeded although rank 1 was ${kind}ed"; return 1; }
  [ "$elapsed" -le $((timeout_s + 30)) ] ||
    { echo "rank 0 took ${elapsed}s to fail (bound $((timeout_s + 30))s)"; return 1; }
  local want='timed out after|lost a peer'
  [ "$kind" = stop ] && want='DEADLINE_EXCEEDED|timed out after'
  grep -Eq "$want" "$CASE_DIR/run.r0.log" || { tail -5 "$CASE_DIR/run.r0.log"; return 1; }
  echo "RESULT rank 0 failed ${elapsed}s after the $kind: $(grep -Eom1 "group [^ ]* op [^ ]* step [0-9]*: ($want)[^\"]{0,60}" "$CASE_DIR/run.r0.log")"
}

hsdp_vs_fsdp2() {
  local w=$NGPU s=$((NGPU / 2)) port py=$TORCH_VENV/bin/python
  # shellcheck disable=SC2046
  run_ranks "$w" ours --spec bench/gpu/gpt2_bf16.yaml --set world_size="$w" \
    --set fsdp.sharding_strategy=HYBRID_SHARD --set fsdp.hybrid_shard_degree="$s" \
    --set train.global_batch_size=$((w * 8)) || { tail -5 "$CASE_DIR"/ours.r0.log; return 1; }
  port=$(next_port)
  timeout 300 "$py" -m torch.distributed.run --nproc_per_node="$w" --master_port="$port" \
    bench/gpu/torch_fsdp2_gpt2.py --data data/tinyshakespeare.txt --dtype bf16 --mode hsdp \
    --shard "$s" > "$CASE_DIR/fsdp2.log" 2>&1 || { tail -5 "$CASE_DIR/fsdp2.log"; return 1; }
  local ours theirs
  ours=$("$py" -c 'import json,statistics,sys; r=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]; print("%.4f" % statistics.median(x["step_time_s"] for x in r[5:] or r))' "$CASE_DIR/ours.r0.jsonl")
  theirs=$("$py" -c 'import json,sys; print("%.4f" % json.loads(sys.argv[1])["step_s"])' "$(grep -m1 '^{' "$CASE_DIR/fsdp2.log")")
  echo "RESULT W=$w S=$s step s: ours $ours, FSDP2 HSDP $theirs"
}

# ---- the plan ----------------------------------------------------------------------------------
{
  echo "bench/gpu/multi_gpu.sh$([ "$DRY_RUN" = 1 ] && echo ' --dry-run')"
  echo "date $(date -u '+%Y-%m-%d %H:%M:%S UTC'); GPUs $NGPU; trainer $TRAINER; steps $STEPS"
} | tee "$RESULTS"
if [ "$DRY_RUN" = 0 ] && [ ! -x "$TRAINER" ]; then
  echo "no trainer at $TRAINER: run bench/gpu/pack.sh (or bazel build //trainer:trainer) first" |
    tee -a "$RESULTS"
  exit 2
fi

for w in 1 2 8; do
  case_ "launch_torchrun_W$w" "$w" "torchrun-style W=$w FULL_SHARD, one context per GPU" \
    launch_torchrun "$w"
done
case_ local_rank_beyond_gpus 1 "LOCAL_RANK=#GPUs is refused by name" local_rank_beyond
for w in 1 2 8; do
  case_ "launch_daemon_W$w" "$w" "worker daemon W=$w, one context per GPU" launch_daemon "$w" ""
done
if [ "$NGPU" -ge 3 ] && [ "$DRY_RUN" = 0 ]; then
  LAST_TWO=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | tail -2 | tr -d ' ' | paste -sd,)
else
  LAST_TWO="GPU-<uuid of GPU N-2>,GPU-<uuid of GPU N-1>"
fi
case_ daemon_visible_subset 3 "daemon with CUDA_VISIBLE_DEVICES=$LAST_TWO runs W=2 there" \
  launch_daemon 2 "$LAST_TWO"

# Parity matrix against CPU Gloo.
for dtype in FP32 BF16; do
  mp=(--set "fsdp.mixed_precision.param_dtype=$dtype" --set "fsdp.mixed_precision.reduce_dtype=$dtype")
  for s in 2 4; do
    for strategy in FULL_SHARD SHARD_GRAD_OP; do
      case_ "parity_${strategy}_S${s}_$dtype" "$s" "$strategy W=$s vs CPU Gloo" parity "$s" 1 \
        --set fsdp.sharding_strategy=$strategy --set fsdp.hybrid_shard_degree=0 "${mp[@]}"
    done
    for strategy in HYBRID_SHARD HYBRID_SHARD_ZERO2; do
      case_ "parity_${strategy}_S${s}_$dtype" $((2 * s)) "$strategy W=$((2 * s)) S=$s vs CPU Gloo" \
        parity $((2 * s)) 1 --set fsdp.sharding_strategy=$strategy --set fsdp.hybrid_shard_degree=$s "${mp[@]}"
    done
  done
  case_ "parity_NO_SHARD_W1_$dtype" 1 "NO_SHARD W=1 vs CPU" parity 1 1 \
    --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 "${mp[@]}"
  case_ "parity_NO_SHARD_W2_$dtype" 2 "NO_SHARD W=2 vs CPU Gloo" parity 2 1 \
    --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 "${mp[@]}"
done
FS=(--set fsdp.sharding_strategy=FULL_SHARD --set fsdp.hybrid_shard_degree=0)
{
  case_ parity_prefetch_forward 4 "FULL_SHARD W=4 forward_prefetch" parity 4 1 "${FS[@]}" \
    --set fsdp.forward_prefetch=true
  case_ parity_prefetch_backward_post 4 "FULL_SHARD W=4 BACKWARD_POST" parity 4 1 "${FS[@]}" \
    --set fsdp.backward_prefetch=BACKWARD_POST
  case_ parity_prefetch_none 4 "FULL_SHARD W=4 BACKWARD_NONE" parity 4 1 "${FS[@]}" \
    --set fsdp.backward_prefetch=BACKWARD_NONE
  case_ parity_limit_all_gathers 4 "FULL_SHARD W=4 limit_all_gathers" parity 4 1 "${FS[@]}" \
    --set fsdp.limit_all_gathers=true --set fsdp.forward_prefetch=true
  case_ parity_accumulation 4 "FULL_SHARD W=4, 2 micro-batches per step" parity 4 2 "${FS[@]}"
  case_ parity_hybrid_accumulation_offload 4 "HYBRID_SHARD W=4 S=2, accumulation 2, cpu_offload" \
    parity 4 2 --set fsdp.sharding_strategy=HYBRID_SHARD --set fsdp.hybrid_shard_degree=2 \
    --set fsdp.cpu_offload=true
}

# Faults (two ranks: NCCL refuses two ranks on one GPU).
case_ delay_rank 2 "rank 1 stalled 10 s (SIGSTOP/SIGCONT): same losses" fault delay "${FS[@]}"
case_ kill_rank 2 "rank 1 SIGKILLed: rank 0 fails within timeout + 30 s" fault kill "${FS[@]}"
case_ stop_rank_offload 2 "rank 1 SIGSTOPped, cpu_offload + overlap: DEADLINE_EXCEEDED in bound" \
  fault stop "${FS[@]}" --set fsdp.cpu_offload=true
case_ hsdp_vs_fsdp2 4 "GPT-2 small bf16 HYBRID_SHARD S=N/2: step time vs FSDP2 HSDP" hsdp_vs_fsdp2

{
  echo
  if [ "$DRY_RUN" = 1 ]; then
    echo "plan: $(grep -c '^RUN ' "$WORK/cases.txt") case(s) would run, $SKIPPED skipped (dry run: nothing ran)"
  else
    echo "cases: $PASSED passed, $FAILED failed, $SKIPPED skipped (need more GPUs than $NGPU)"
  fi
} | tee -a "$RESULTS"
grep -E '^(RUN|PASS|FAIL|SKIP)' "$WORK/cases.txt" >> "$RESULTS"
[ "$FAILED" = 0 ]
