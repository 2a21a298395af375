#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, starts a local cluster (a
# coordinator and two worker daemons with two CPU slots each), submits a tiny GPT on the shipped
# tiny Shakespeare corpus with HYBRID_SHARD degree 2 over 4 ranks, shows live progress, prints a
# text sample and the checkpoint list, and shuts the cluster down.
#
# Extra arguments go to `shardctl submit`, e.g.  tools/demo.sh --set train.steps=50
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash tools/setup.sh
echo "== building (the first build takes a while)"
bazel build //coordinator:coordinator //worker:worker //trainer:trainer //cli:shardctl 2>&1 \
  | grep -v -E "^(Loading|Analyzing|INFO|\[)" || true
bin="$(bazel info bazel-bin 2>/dev/null)"
shardctl="$bin/cli/shardctl"
state="$here/.cluster"

"$shardctl" cluster down --state_dir="$state" >/dev/null 2>&1 || true
trap '"$shardctl" cluster down --state_dir="$state" || true' EXIT

echo "== starting a local cluster: 1 coordinator, 2 workers x 2 CPU slots"
"$shardctl" cluster up --state_dir="$state" --workers=2 --slots=2
"$shardctl" workers --state_dir="$state"

echo "== submitting examples/tiny_gpt_shakespeare.yaml (tiny GPT, HYBRID_SHARD degree 2, 4 ranks)"
# Checkpoints every 100 steps (the last two kept) under out/checkpoints/<job id>.
job="$("$shardctl" submit examples/tiny_gpt_shakespeare.yaml --state_dir="$state" \
  --set checkpoint.dir="$here/out/checkpoints" --set checkpoint.every_steps=100 \
  --set checkpoint.keep_last=2 --set checkpoint.save_final=true "$@")"
echo "job $job"
rc=0
"$shardctl" watch "$job" --state_dir="$state" || rc=$?

echo "== status"
"$shardctl" status "$job" --state_dir="$state" || true
echo "== checkpoints"
"$shardctl" checkpoints "$job" --state_dir="$state" || true
exit $rc
