#!/usr/bin/env bash
# Packs the GPU checks for a machine that has a GPU and PyTorch but no Bazel, gRPC or Abseil (the
# lent H200 machine: torch 2.11.0+cu130 in /opt/torch/.venv, nothing to install from).
#
#   bench/gpu/pack.sh [extra bazel targets...]   # here, on the build machine
#   -> .gpu/bin/  the binaries (trainer, worker, coordinator, shardctl, GPU test binaries)
#      .gpu/lib/  every shared library they load that the GPU machine will not have: Debian's
#                 gRPC, protobuf, Abseil, Gloo, yaml-cpp, OpenSSL, ... (not glibc/libstdc++, which
#                 it has in newer versions, and not LibTorch/CUDA/NCCL, which come from its torch
#                 wheel: the build links the same torch==2.11.0+cu130 wheel, so the ABI agrees).
# Then bench/gpu/run_all.sh on the GPU machine, with .gpu carried, finds .gpu/bin and skips the
# build. .gpu is git-ignored (built output).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
TARGETS=(//trainer:trainer //worker:worker //coordinator:coordinator //cli:shardctl
         //fsdp:nccl_communicator_test //fsdp/tests:standin_parity_gpu_test
         //fsdp/tests:cpu_offload_gpu_test //tests/smoke:nccl_smoke "$@")
bazel build --jobs=2 "${TARGETS[@]}"
BIN=$(bazel info bazel-bin 2>/dev/null)
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
for t in "${TARGETS[@]}"; do
  path=${t#//}; path=${path/://}
  cp "$BIN/$path" .gpu/bin/
  chmod u+w ".gpu/bin/$(basename "$path")"
  strip --strip-debug ".gpu/bin/$(basename "$path")" 2>/dev/null || true
done
# Libraries the GPU machine brings itself: the C runtime and the torch wheel's (with its CUDA,
# cuDNN, NCCL... from nvidia-* wheels or /usr/local/cuda).
keep_out='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil\.so|libstdc\+\+|libgcc_s|libtorch|libc10|libcu|libnccl|libnv|libcaffe2|libgomp|libshm)'
for f in .gpu/bin/*; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if ! [[ $name =~ $keep_out ]]; then cp -L "$path" .gpu/lib/; fi
done
# The GPU machine gets the working tree without .git: the results name the commit from here.
git rev-parse --short HEAD > .gpu/COMMIT 2>/dev/null || true
du -sh .gpu/bin .gpu/lib
echo "packed $(ls .gpu/bin | wc -l) binaries and $(ls .gpu/lib | wc -l) libraries into .gpu/"
