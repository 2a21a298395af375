#!/usr/bin/env bash
# GPU check (tag "gpu", not in the default test run): the trainer trains the tiny GPT on CUDA
#   1. with the single-process backend and with the FSDP engine (W = 1): the same losses (1e-3);
#   2. with the FSDP engine and fsdp.cpu_offload=true: the same losses as 1. (1e-4 relative; the
#      optimizer steps on the host instead of the GPU), the loss falls, and less GPU memory at
#      peak (cuda_max_allocated_bytes: the shards and the optimizer state left the GPU); it saves
#      checkpoints at steps 10 and 20 from the host shards;
#   3. with offload, resumed from the step-10 checkpoint: steps 15 and 20 log the losses of 2.
#   4. a TorchScript model (models/testdata/blocks_lm.pt, sharded per block): the FSDP engine's
#      sharded load (parameters read from the file straight into CUDA shards, buffers moved to the
#      device) logs the losses of the single-process backend's whole load (1e-3).
# Run from the repository root (the spec path is relative); prints the figures it compared.
# GPU_TEST_DEVICE=CPU runs the same comparisons on the CPU (a check of this script without a GPU).
#   $1: the trainer binary
set -euo pipefail
TRAINER="$(realpath "$1")"
OUT="${TEST_TMPDIR:-$(mktemp -d)}"
CKPT="$OUT/ckpt_offload"
DEVICE=${GPU_TEST_DEVICE:-CUDA}
COMMON=(--spec examples/tiny_gpt_shakespeare.yaml --set device.kind=$DEVICE
        --set fsdp.sharding_strategy=NO_SHARD --set fsdp.hybrid_shard_degree=0
        --set train.steps=20 --set train.log_every=5 --set train.eval_every=10)
run() {  # $1: name; rest: extra args
  local name="$1"; shift
  "$TRAINER" "${COMMON[@]}" "$@" --metrics_out "$OUT/$name.jsonl" 2>"$OUT/$name.log" ||
    { echo "the $name run failed:"; tail -20 "$OUT/$name.log"; exit 1; }
}
losses() { grep -o '"step": [0-9]*, "loss": [0-9.e+-]*' "$1" | sed 's/"step": //; s/, "loss": / /'; }
field() { { grep -o "\"$2\": [0-9]*" "$1" || true; } | tail -1 | cut -d' ' -f2; }
compare() {  # $1 $2: metrics files, $3: relative tolerance, $4: expected common steps
  join <(losses "$1" | sort -k1,1) <(losses "$2" | sort -k1,1) |
    awk -v tol="$3" -v want="$4" '{ n++; d = $2 - $3; if (d < 0) d = -d }
                                  d > tol * $2 { bad = 1 } END { exit bad || n != want }' ||
    { echo "losses differ ($1 vs $2): $(losses "$1" | tr '\n' ' ') vs $(losses "$2" | tr '\n' ' ')";
      exit 1; }
}
run local --backend local
run fsdp --backend fsdp
compare "$OUT/local.jsonl" "$OUT/fsdp.jsonl" 1e-3 4
echo "losses: fsdp $(losses "$OUT/fsdp.jsonl" | tr '\n' ' ')"

if [[ $DEVICE == CUDA ]]; then  # 2. and 3.: offload needs CUDA
run offload --backend fsdp --set fsdp.cpu_offload=true --set checkpoint.dir="$CKPT" \
  --set checkpoint.every_steps=10 --set checkpoint.keep_last=0
run resumed --backend fsdp --set fsdp.cpu_offload=true --set checkpoint.dir="$CKPT" \
  --set checkpoint.resume_step=10 --set checkpoint.every_steps=0 --set checkpoint.save_final=false
compare "$OUT/fsdp.jsonl" "$OUT/offload.jsonl" 1e-4 4
compare "$OUT/offload.jsonl" "$OUT/resumed.jsonl" 1e-4 2
echo "losses: offload $(losses "$OUT/offload.jsonl" | tr '\n' ' ')"
first=$(losses "$OUT/offload.jsonl" | sed -n 1p | cut -d' ' -f2)
last=$(losses "$OUT/offload.jsonl" | tail -1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' ||
  { echo "loss did not fall: $first -> $last"; exit 1; }
[[ -f "$CKPT/step_10/MANIFEST.json" && -f "$CKPT/step_20/MANIFEST.json" ]] ||
  { echo "the offload run saved no step_10/step_20 checkpoint: $(ls -R "$CKPT" | head)"; exit 1; }
plain_peak=$(field "$OUT/fsdp.jsonl" cuda_max_allocated_bytes)
offload_peak=$(field "$OUT/offload.jsonl" cuda_max_allocated_bytes)
echo "cuda_max_allocated_bytes: fsdp ${plain_peak:-none}, fsdp + cpu_offload ${offload_peak:-none}"
grep -h "MiB" "$OUT/fsdp.log" "$OUT/offload.log" | grep -i "holds" || true
[[ -n "$plain_peak" && -n "$offload_peak" ]] ||
  { echo "no cuda_max_allocated_bytes in the metrics"; exit 1; }
((offload_peak < plain_peak)) || { echo "offload did not lower the GPU peak"; exit 1; }
fi

# 4. A scripted model: the sharded load on the device against the single-process whole load.
SCRIPTED="$OUT/scripted.yaml"
cat >"$SCRIPTED" <<YAML
name: scripted-gpu
world_size: 1
model: {architecture: TORCHSCRIPT, torchscript_path: $PWD/models/testdata/blocks_lm.pt,
        vocab_size: 256, block_size: 64}
data: {path: $PWD/data/tinyshakespeare.txt, seq_len: 32, shuffle_seed: 3}
optimizer: {lr: 3.0e-3, warmup_steps: 0}
fsdp: {sharding_strategy: NO_SHARD, block_class: Block}
train: {steps: 10, global_batch_size: 8, micro_batch_size: 4, log_every: 5, eval_every: 0,
        sample_tokens: 0}
device: {kind: $DEVICE}
YAML
scripted() {  # $1: name; rest: extra args
  local name="$1"; shift
  "$TRAINER" --spec "$SCRIPTED" "$@" --metrics_out "$OUT/$name.jsonl" 2>"$OUT/$name.log" ||
    { echo "the $name run failed:"; tail -20 "$OUT/$name.log"; exit 1; }
}
scripted scripted_local --backend local
scripted scripted_fsdp --backend fsdp
grep -q "parameters read from the file shard by shard" "$OUT/scripted_fsdp.log" ||
  { echo "the scripted model was not loaded shard by shard: $(grep -m1 TorchScript "$OUT/scripted_fsdp.log")"; exit 1; }
compare "$OUT/scripted_local.jsonl" "$OUT/scripted_fsdp.jsonl" 1e-3 2
echo "losses: scripted $(losses "$OUT/scripted_fsdp.jsonl" | tr '\n' ' ')"
echo "GPU trainer checks passed"
