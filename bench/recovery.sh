#!/usr/bin/env bash
# Recovery from one rank failure: replica-group fault tolerance (issue #19) against today's
# restart from the last committed checkpoint, the same W = 6 HYBRID_SHARD job on a local cluster
# (see bench/recovery.py). Arguments go to the driver: --reps=3 --fail_step=25 --ckpt_every=10.
# Writes bench/results/recovery.md and bench/results/recovery.json.
source "$(dirname "$0")/common.sh"
bench_build //coordinator:coordinator //worker:worker //trainer:trainer //cli:shardctl
exec "$PY" bench/recovery.py --bin "$BIN" "$@"
