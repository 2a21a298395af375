#!/usr/bin/env bash
# The coordinator's resident set while a hostile client with real credentials sends the worst
# request of each kind for 60 s (issue #31; see bench/hostile_rss.py). Arguments go to the
# driver: --seconds 60 --bound_mib 1536. Writes bench/results/hostile_rss.txt.
source "$(dirname "$0")/common.sh"
bench_build //coordinator:coordinator //worker:worker //trainer:trainer //cli:shardctl
exec "$PY" bench/hostile_rss.py --bin "$BIN" "$@"
