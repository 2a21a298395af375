#!/usr/bin/env bash
# GPU throughput benchmark, one command, under ten minutes on one H200 (bench/gpu/throughput_bench.py
# says what it measures):
#   1. GPT-2 small (124M) bf16, sequence 1024, micro-batches 8, 16, 32: ours (the trainer that
#      bench/gpu/pack.sh packs into .gpu/bin), PyTorch 2.11 FSDP2 eager, FSDP2 + torch.compile and
#      plain torch.compile, alternating: tokens/s, MFU, peak GPU memory;
#   2. the largest Llama-style model that trains on the GPU, ours and FSDP2, with and without CPU
#      offload, stepping the size up under a time cap.
#
#   bench/gpu/pack.sh                  # on the build machine: binaries + libraries into .gpu/
#   bench/gpu/throughput.sh            # on the GPU machine, .gpu carried along
#   bench/gpu/throughput.sh --cpu_smoke   # anywhere: tiny models on the CPU, checks the script runs
#                                         # (TRAINER=bazel-bin/trainer/trainer without a .gpu/)
#
# Environment: TORCH_VENV (default /opt/torch/.venv, else the repo's .venv), TRAINER (default
# .gpu/bin/trainer), SHARDLINE_PEAK_FLOPS (989e12: dense bf16 of an H100/H200),
# THROUGHPUT_BUDGET_S (540), THROUGHPUT_SECTIONS (gpt2,llama), THROUGHPUT_ARGS (more flags for
# throughput_bench.py, e.g. "--llama_sizes 6.7B,9.2B --llama_attempt_s 200").
# Writes bench/gpu/results_throughput.txt (THROUGHPUT_RESULTS overrides; the smoke writes to its
# work folder), and copies it and an archive of the logs to $OUT when that is set.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
SMOKE=()
[ "${1:-}" = "--cpu_smoke" ] && SMOKE=(--cpu_smoke)
WORK=${WORK:-$REPO/bench/gpu/out/throughput}
rm -rf "$WORK" && mkdir -p "$WORK"
if [ ${#SMOKE[@]} -gt 0 ]; then
  RESULTS=${THROUGHPUT_RESULTS:-$WORK/results_throughput_smoke.txt}
else
  RESULTS=${THROUGHPUT_RESULTS:-$REPO/bench/gpu/results_throughput.txt}
fi
TORCH_VENV=${TORCH_VENV:-/opt/torch/.venv}
[ -x "$TORCH_VENV/bin/python" ] || TORCH_VENV=$REPO/.venv
PY=$TORCH_VENV/bin/python
[ -x "$PY" ] || { echo "no python at $PY (set TORCH_VENV)" >&2; exit 2; }
TRAINER=${TRAINER:-$REPO/.gpu/bin/trainer}
if [ "$TRAINER" = "$REPO/.gpu/bin/trainer" ]; then
  # Prebuilt by pack.sh: its bundled libraries, then the torch wheel's (as run_all.sh does).
  TORCH_DIR=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  NV=$(ls -d "$(dirname "$TORCH_DIR")"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
  export LD_LIBRARY_PATH="$REPO/.gpu/lib:$TORCH_DIR/lib:$NV/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
[ -x "$TRAINER" ] || { echo "no trainer at $TRAINER: run bench/gpu/pack.sh (or set TRAINER)" >&2; exit 2; }
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || cat .gpu/COMMIT 2>/dev/null || echo unknown)
HEADER="date $(date -u '+%Y-%m-%d %H:%M:%S UTC'); commit $COMMIT; host $(hostname); nproc $(nproc); mem $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu /')
$("$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1)"
# shellcheck disable=SC2086
"$PY" bench/gpu/throughput_bench.py --trainer "$TRAINER" --work "$WORK" --results "$RESULTS" \
  --budget_s "${THROUGHPUT_BUDGET_S:-540}" --sections "${THROUGHPUT_SECTIONS:-gpt2,llama}" \
  --peak_flops "${SHARDLINE_PEAK_FLOPS:-989e12}" --header "$HEADER" "${SMOKE[@]}" ${THROUGHPUT_ARGS:-}
rc=$?
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && cp "$RESULTS" "$OUT"/
  (cd "$WORK" && tar czf "$OUT/throughput_logs.tgz" --exclude='*.jsonl.tmp' . 2>/dev/null)
fi
exit $rc
