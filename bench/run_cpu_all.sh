#!/usr/bin/env bash
# The four CPU benchmarks in a row, each writing bench/results/<name>.txt:
# fsdp_vs_torch, collectives, overlap, memory. Takes 15-25 minutes on a quiet 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bench/fsdp_vs_torch.sh
bench/collectives.sh
bench/overlap.sh
bench/memory.sh
