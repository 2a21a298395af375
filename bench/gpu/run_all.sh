#!/usr/bin/env bash
# GPU checks and benchmark, one command, for a machine with one NVIDIA GPU (an H200) and PyTorch
# 2.11 built for CUDA 13 in a virtual environment (default /opt/torch/.venv; override with TORCH_VENV):
#
#   bench/gpu/pack.sh               # on the build machine: binaries + libraries into .gpu/
#   bench/gpu/run_all.sh            # on the GPU machine, .gpu carried along: ~2-4 minutes
#
#   1. binaries: the prebuilt ones in .gpu/bin (the lent GPU machine has no Bazel, gRPC or Abseil;
#      pack.sh links them against the same torch==2.11.0+cu130 wheel), else builds our trainer and
#      the NCCL tests with Bazel against this venv's LibTorch and CUDA/NCCL (CUDA_HOME:
#      /usr/local/cuda when it has nccl.h, else a directory of links into the venv's nvidia-*
#      wheels; RUN_ALL_BUILD_ONLY=1 stops after the build);
#   2. runs the GPU tests (NCCL smoke, NCCL communicator with the watchdog's abort path, CPU
#      offload, the one-GPU stand-in for S > 1, trainer on CUDA with a scripted model loaded
#      shard by shard), then bench/gpu/multi_gpu.sh as
#      far as the GPUs allow (2b);
#   3. trains GPT-2 small (124M, bench/gpu/gpt2_bf16.yaml: bf16 compute, 8 x 1024 tokens per step,
#      30 steps) with our trainer, with and without fsdp.cpu_offload, then the same model with
#      PyTorch FSDP2 (bench/gpu/torch_fsdp2_gpt2.py), FSDP2 + CPUOffloadPolicy, and plain PyTorch
#      autocast without FSDP, all on the same GPU; reports median step time, tokens/s, MFU
#      (models/gpt.cc's FLOP count over the dense bf16 peak, 989 TFLOP/s by default:
#      SHARDLINE_PEAK_FLOPS) and the GPU memory peak;
#   4. with prebuilt binaries: starts a local cluster (coordinator + one worker daemon, which
#      finds the GPU) and runs a CUDA job through shardctl with checkpoints.
# RUN_ALL_TESTS_ONLY=1 stops after the tests (phase 2). RUN_ALL_THROUGHPUT=1 runs
# bench/gpu/throughput.sh after the tests instead of phases 3 and 4, in what is left of ten minutes
# (THROUGHPUT_BUDGET_S overrides), and appends its table to the results.
# Writes bench/gpu/results_gpu.txt (and copies it and an archive of the logs to $OUT when that is
# set, as the device runner provides). Each phase has its own time limit.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
WORK=${WORK:-$REPO/bench/gpu/out}
mkdir -p "$WORK"
RESULTS=${RUN_ALL_RESULTS:-$REPO/bench/gpu/results_gpu.txt}
TORCH_VENV=${TORCH_VENV:-/opt/torch/.venv}
PY=$TORCH_VENV/bin/python
PEAK=${SHARDLINE_PEAK_FLOPS:-989e12}
log() { echo "[run_all $(date -u +%H:%M:%S)] $*" | tee -a "$WORK/run_all.log" >&2; }
finish() {
  # The device runner brings back at most 8 files: the results and one archive of the logs.
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" && cp "$RESULTS" "$OUT"/
    (cd "$WORK" && tar czf "$OUT/gpu_logs.tgz" --exclude=bazel-ob --exclude=cuda_home \
      --exclude='ckpt*' --exclude='cluster/*/jobs/*/attempt-*/data*' . 2>/dev/null)
  fi
  exit "${1:-0}"
}

# ---- 0. machine --------------------------------------------------------------------------------
[ -x "$PY" ] || { log "no python at $PY (set TORCH_VENV)"; finish 2; }
{
  echo "bench/gpu/run_all.sh"
  echo "date $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host $(hostname); nproc $(nproc); cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu /'
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
} > "$RESULTS" 2>&1
cat "$RESULTS"
TORCH_DIR=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
SITE=$(dirname "$TORCH_DIR")

# ---- 1. binaries: prebuilt (.gpu from bench/gpu/pack.sh) or built here with Bazel ---------------
if [ -x "$REPO/.gpu/bin/trainer" ] && [ -z "${RUN_ALL_BUILD:-}" ]; then
  # The GPU machine has no Bazel, gRPC or Abseil: pack.sh built the binaries on the build machine
  # against the same torch wheel and bundled the libraries this machine lacks.
  BIN=$REPO/.gpu/bin
  NV=$(ls -d "$SITE"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
  export LD_LIBRARY_PATH="$REPO/.gpu/lib:$TORCH_DIR/lib:$NV/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  log "prebuilt binaries in $BIN; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  missing=$(for f in "$BIN"/*; do ldd "$f" | grep 'not found' | sed "s|^|$(basename "$f"): |"; done)
  if [ -n "$missing" ]; then
    log "unresolved libraries:"; echo "$missing" >&2
    echo "FAILED: unresolved libraries: $(echo "$missing" | tr '\n' ' ')" >> "$RESULTS"
  fi
  trainer_bin=$BIN/trainer
else
  if [ -z "${CUDA_HOME:-}" ]; then
    if [ -f /usr/local/cuda/include/nccl.h ] && [ -z "${RUN_ALL_CUDA_FROM_WHEELS:-}" ]; then
      CUDA_HOME=/usr/local/cuda
    else
      # The wheels ship headers and versioned libraries per package (nvidia/<pkg>/{include,lib});
      # third_party/cuda wants one include/ with nccl.h and lib64/ with libcudart.so, libnccl.so.
      CUDA_HOME=$WORK/cuda_home
      rm -rf "$CUDA_HOME" && mkdir -p "$CUDA_HOME/include" "$CUDA_HOME/lib64"
      for d in "$SITE"/nvidia/*/ "$SITE"/nvidia/*/*/; do
        [ -d "$d/include" ] && cp -rs "$d/include/." "$CUDA_HOME/include/" 2>/dev/null
        if [ -d "$d/lib" ]; then
          for f in "$d"/lib/*.so*; do
            [ -e "$f" ] || continue
            ln -sf "$f" "$CUDA_HOME/lib64/$(basename "$f")"
            base=$(basename "$f" | sed 's/\.so\..*/.so/')
            [ -e "$CUDA_HOME/lib64/$base" ] || ln -sf "$f" "$CUDA_HOME/lib64/$base"
          done
        fi
      done
    fi
  fi
  export CUDA_HOME SHARDLINE_TORCH_DIR=$TORCH_DIR
  log "CUDA_HOME=$CUDA_HOME (nccl.h: $([ -f "$CUDA_HOME/include/nccl.h" ] && echo yes || echo NO)); SHARDLINE_TORCH_DIR=$TORCH_DIR"
  command -v bazel >/dev/null || { log "no .gpu/bin and no bazel: run bench/gpu/pack.sh on a build machine and carry .gpu"; echo "FAILED: no binaries" >> "$RESULTS"; finish 2; }
  BZ=(bazel --output_base="$WORK/bazel-ob")
  log "building //trainer:trainer, the daemon binaries (multi_gpu.sh's launch_daemon cases) and the GPU tests"
  if ! timeout 480 "${BZ[@]}" build --jobs="$(nproc)" //trainer:trainer //fsdp:nccl_communicator_test \
      //worker:worker //coordinator:coordinator //cli:shardctl > "$WORK/build.log" 2>&1; then
    log "build failed; tail of $WORK/build.log:"; tail -30 "$WORK/build.log" >&2
    echo "FAILED: build (see build.log)" >> "$RESULTS"; finish 1
  fi
  BIN=$("${BZ[@]}" info bazel-bin 2>/dev/null)
  trainer_bin=$BIN/trainer/trainer
  if [ -n "${RUN_ALL_BUILD_ONLY:-}" ]; then  # For checking the build on a machine without a GPU.
    log "built $trainer_bin; stopping (RUN_ALL_BUILD_ONLY)"; finish 0
  fi
fi

# ---- 2. GPU-tagged tests -----------------------------------------------------------------------
if [ "$BIN" = "$REPO/.gpu/bin" ]; then
  # Each GPU test binary and script, run directly (what `bazel test --test_tag_filters=gpu` runs).
  : > "$WORK/gpu_tests.log"
  pass=0; fail=0
  gpu_test() {  # $1: name; rest: command
    local name=$1; shift
    echo "==== $name" >> "$WORK/gpu_tests.log"
    local rc=0
    TEST_TMPDIR=$(mktemp -d) timeout 120 "$@" >> "$WORK/gpu_tests.log" 2>&1 || rc=$?
    if [ $rc -eq 0 ]; then
      pass=$((pass + 1)); echo "  $name PASSED" >> "$RESULTS.tests"
    else
      fail=$((fail + 1)); echo "  $name FAILED (exit $rc)" >> "$RESULTS.tests"
    fi
  }
  : > "$RESULTS.tests"
  gpu_test nccl_smoke "$BIN/nccl_smoke"
  for t in "$BIN"/*_test; do
    gpu_test "$(basename "$t")" "$t"
  done
  for s in trainer/gpu_test.sh $(ls worker/*_gpu_test.sh fsdp/*_gpu_test.sh 2>/dev/null); do
    gpu_test "$s" bash "$s" "$trainer_bin"
  done
  echo "gpu tests: $pass passed, $fail failed" >> "$RESULTS"
  cat "$RESULTS.tests" >> "$RESULTS"; rm -f "$RESULTS.tests"
else
  GPU_TESTS=$("${BZ[@]}" query 'attr(tags, "gpu", tests(//...))' 2>/dev/null | tr '\n' ' ')
  log "GPU tests: $GPU_TESTS"
  timeout 240 "${BZ[@]}" test --jobs="$(nproc)" --test_tag_filters=gpu --test_output=errors --test_summary=short \
    $GPU_TESTS > "$WORK/gpu_tests.log" 2>&1
  TEST_RC=$?
  echo "gpu tests (bazel exit $TEST_RC): $(grep -cE '^//.* PASSED' "$WORK/gpu_tests.log") passed, $(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS)' "$WORK/gpu_tests.log") failed" >> "$RESULTS"
  grep -E '^//' "$WORK/gpu_tests.log" | sed 's/^/  /' >> "$RESULTS"
fi

if [ -n "${RUN_ALL_TESTS_ONLY:-}" ]; then  # Just the GPU tests (a short re-check after a change).
  cat "$RESULTS"; finish 0
fi

# ---- 2b. multi-GPU checks (bench/gpu/multi_gpu.sh), as far as this machine's GPUs allow ------
# On one GPU: W = 1 launches (torchrun-style and daemon, one context per GPU), the LOCAL_RANK
# check and W = 1 parity against the CPU; it lists what it skipped. RUN_ALL_SKIP_MULTI_GPU=1 skips.
if [ -z "${RUN_ALL_SKIP_MULTI_GPU:-}" ]; then
  log "multi-GPU checks (bench/gpu/multi_gpu.sh)"
  MG_BIN=
  [ "$BIN" = "$REPO/.gpu/bin" ] && MG_BIN=$BIN
  MG_WORK=$WORK/multi_gpu
  MG_RESULTS=$WORK/results_multi_gpu.txt
  BIN=$MG_BIN TORCH_VENV=$TORCH_VENV WORK=$MG_WORK RESULTS=$MG_RESULTS \
    timeout "${MULTI_GPU_BUDGET_S:-300}" bash bench/gpu/multi_gpu.sh > "$WORK/multi_gpu.log" 2>&1
  echo "multi_gpu.sh (exit $?):" >> "$RESULTS"
  grep -E '^(cases|PASS|FAIL|SKIP)' "$MG_RESULTS" 2>/dev/null | sed 's/^/  /' >> "$RESULTS"
fi

if [ -n "${RUN_ALL_THROUGHPUT:-}" ]; then  # The throughput benchmark instead of phases 3 and 4.
  budget=${THROUGHPUT_BUDGET_S:-$((540 - SECONDS))}
  log "throughput benchmark (bench/gpu/throughput.sh), budget ${budget}s"
  THROUGHPUT_BUDGET_S=$budget TRAINER=$trainer_bin TORCH_VENV=$TORCH_VENV WORK=$WORK/throughput \
    SHARDLINE_PEAK_FLOPS=$PEAK OUT= bash bench/gpu/throughput.sh > "$WORK/throughput.log" 2>&1
  { echo; cat "${THROUGHPUT_RESULTS:-$REPO/bench/gpu/results_throughput.txt}"; } >> "$RESULTS"
  cat "$RESULTS"; finish 0
fi

# ---- 3. GPT-2 small, ours vs PyTorch FSDP2 -----------------------------------------------------
# One row per run: "label step_s tokens_per_s mfu max_gpu_bytes" (max_gpu_bytes: -1 if unknown).
ROWS=$WORK/rows.txt
: > "$ROWS"
median_metrics() {  # $1: metrics JSONL -> "step_s tokens_per_s mfu max_gpu_bytes" (steps 6..N-1)
  "$PY" - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
body = [r for r in rows if 5 < r["step"] < len(rows)] or rows
med = lambda k: statistics.median(r[k] for r in body)
# The trainer's CUDA caching-allocator peak, if this build reports one.
gpu = [v for r in rows for k, v in r.items() if "cuda" in k and "max" in k and "alloc" in k]
print(f'{med("step_time_s"):.4f} {med("tokens_per_s"):.0f} {med("mfu"):.4f} {max(gpu) if gpu else -1}')
EOF
}
run_ours() {  # $1: label; rest: extra --set
  local label=$1; shift
  log "ours: GPT-2 small $label"
  if RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 SHARDLINE_PEAK_FLOPS=$PEAK \
      timeout 150 "$trainer_bin" --spec bench/gpu/gpt2_bf16.yaml "$@" \
      --metrics_out "$WORK/ours_$label.jsonl" > "$WORK/ours_$label.log" 2>&1; then
    echo "ours_($label) $(median_metrics "$WORK/ours_$label.jsonl")" >> "$ROWS"
  else
    echo "ours ($label): FAILED: $(grep -m1 -E 'E[0-9]{4}|error|refus' "$WORK/ours_$label.log" | cut -c1-200)" >> "$RESULTS"
  fi
}
run_theirs() {  # $1: --mode
  log "theirs: PyTorch $1 GPT-2 small bf16"
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29518 \
    timeout 150 "$PY" bench/gpu/torch_fsdp2_gpt2.py --data data/tinyshakespeare.txt --dtype bf16 \
    --mode "$1" --peak_flops "$PEAK" > "$WORK/torch_$1.log" 2>&1
  local line
  line=$(grep -m1 '^{' "$WORK/torch_$1.log")
  if [ -n "$line" ]; then
    "$PY" -c 'import json,sys; r=json.loads(sys.argv[1]); print("torch_%s %.4f %.0f %.4f %d" % (sys.argv[2], r["step_s"], r["tokens_per_s"], r["mfu"], r["max_memory_allocated_gib"] * 2**30))' "$line" "$1" >> "$ROWS"
  else
    echo "torch $1: FAILED: $(tail -3 "$WORK/torch_$1.log" | tr '\n' ' ' | cut -c1-300)" >> "$RESULTS"
  fi
}
run_ours bf16
run_ours bf16_offload --set fsdp.cpu_offload=true
run_theirs fsdp2
run_theirs fsdp2_offload
run_theirs autocast
{
  echo
  echo "GPT-2 small (124M), one GPU, 8 x 1024 tokens/step, bf16 compute, fp32 master weights, AdamW;"
  echo "median of steps 6..29; MFU = models/gpt.cc FLOPs / $PEAK FLOP/s; GPU GiB = the CUDA caching"
  echo "allocator's max allocated (n/a: not reported); ratio = the row's step time / torch fsdp2's"
  "$PY" - "$ROWS" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
ref = {r[0]: float(r[1]) for r in rows}.get("torch_fsdp2")
print("%-24s %9s %11s %7s %8s %7s" % ("side", "step ms", "tokens/s", "MFU", "GPU GiB", "ratio"))
for name, step, tok, mfu, gpu in rows:
    gib = "%.2f" % (int(float(gpu)) / 2**30) if float(gpu) >= 0 else "n/a"
    ratio = "%.2f" % (float(step) / ref) if ref else "n/a"
    print("%-24s %9.1f %11.0f %6.1f%% %8s %7s" % (name.replace("_", " ", 1), float(step) * 1e3,
                                                 float(tok), float(mfu) * 100, gib, ratio))
EOF
  echo "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
} >> "$RESULTS"

# ---- 4. the whole system on the GPU: coordinator, worker daemon, trainer, through shardctl -----
if [ "$BIN" = "$REPO/.gpu/bin" ]; then
  log "local cluster: a CUDA job through the coordinator and a worker daemon"
  state=$WORK/cluster
  ctl() { timeout 30 "$BIN/shardctl" "$@" --state_dir="$state"; }
  {
    ctl cluster up --workers=1 --slots=1 && ctl workers &&
    job=$(ctl submit examples/tiny_gpt_shakespeare.yaml --set world_size=1 --set device.kind=CUDA \
      --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0 --set train.steps=200 \
      --set train.global_batch_size=8 --set checkpoint.dir="$WORK/ckpt" \
      --set checkpoint.every_steps=100 --set checkpoint.save_final=true) &&
    echo "job $job" && timeout 90 "$BIN/shardctl" watch "$job" --state_dir="$state"
    echo "watch exit $?"
    ctl status "$job"; ctl checkpoints "$job"
    ctl cluster down
  } > "$WORK/cluster.log" 2>&1
  {
    echo
    echo "local cluster on the GPU (shardctl cluster up --workers=1; tiny GPT, device.kind=CUDA, W=1):"
    grep -E "^(cluster up|job |watch exit|state |progress |checkpoint |val loss |memory |w1 )|SCHEDULED|SUCCEEDED|FAILED|PENDING|^[0-9]+ +yes" "$WORK/cluster.log" | head -24 | sed 's/^/  /'
  } >> "$RESULTS"
fi
cat "$RESULTS"
finish 0
