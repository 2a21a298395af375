#!/usr/bin/env bash
# All-gather / reduce-scatter bandwidth: ours vs Gloo direct vs torch.distributed on Gloo (see
# bench/collectives.py). Arguments go to the driver: --world_sizes=2,4 --sizes_mib=1,4,16,64,256
# Writes bench/results/collectives.txt.
source "$(dirname "$0")/common.sh"
bench_build //fsdp:comm_bench
exec "$PY" bench/collectives.py --comm_bench "$BIN/fsdp/comm_bench" "$@"
