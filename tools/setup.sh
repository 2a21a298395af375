#!/usr/bin/env bash
# Installs everything Shardline needs to build and test, and nothing that is already there.
# Idempotent: a second run on a set-up machine only checks and returns.
#   - Debian packages: Bazel (bazel-bootstrap), gRPC, protobuf, Abseil, GoogleTest, Gloo, SQLite,
#     yaml-cpp, OpenSSL (library and command), cpp-httplib, prometheus-cpp, Google Benchmark;
#     clang 14 with libFuzzer for tools/fuzz.sh; clang-format; chart.js (the dashboard's charts)
#     and Chromium with a font (the dashboard's browser test).
#   - A project-local virtual environment at .venv holding torch==2.11.0 from the Python registry;
#     LibTorch (headers + shared libraries) is taken from that wheel by third_party/torch/torch.bzl.
#     Also grpcio, grpcio-tools, pyyaml and matplotlib; kubernetes-validate (pinned; it ships the
#     Kubernetes JSON schemas, so //tests/deploy:kubernetes_manifests_test validates offline);
#     tensorboard and prometheus-client (pinned: tests read the trainer's event files and parse
#     the coordinator's /metrics with them); lizard (pinned: tools/check_sizes.sh measures
#     function lengths with it); and the Python client package itself (python/,
#     `import shardline`; reinstalled when python/ or proto/ change).
#     Hugging Face interop and data preparation (hf/, tools/prepare_data.py): transformers (the
#     logits tests of imported/exported models), tokenizers (tokenizer.json files, offline BPE
#     training), sentencepiece (.model files). Pinned: the tests compare against their numerics.
#   - .bazelrc.user with this machine's absolute paths (disk cache shared by all checkouts).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

TORCH_VERSION="2.11.0"
DEBIAN_PACKAGES=(
  bazel-bootstrap g++ python3-venv
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgloo-dev libgtest-dev libgmock-dev libbenchmark-dev
  libsqlite3-dev libyaml-cpp-dev libssl-dev iproute2 procps
  openssl  # the openssl command: tools/make_dev_certs.sh and the TLS tests
  libcpp-httplib-dev  # the coordinator's metrics HTTP server (coordinator/http/metrics_http_server.cc)
  prometheus-cpp-dev  # the /metrics exposition (coordinator/http/metrics.cc)
  clang libclang-rt-14-dev  # tools/fuzz.sh: clang 14 with libFuzzer and its sanitizer runtimes
  clang-format  # tests/style:clang_format_test and tools/format.sh (Debian 12: clang-format 14)
  libjs-chart.js  # the dashboard's charts, served by the coordinator (coordinator/dashboard/)
  chromium fonts-dejavu-core  # headless browser of //tests/integration:dashboard_browser_test
)

log() { echo "[setup] $*" >&2; }

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The unprivileged user trainers run as under worker --trainer_user (worker/trainer_user.h), and
# that //tests/integration:trainer_user_scenario_test runs them as. Only root can make it (and
# only root can switch to it: the test skips otherwise).
TRAINER_USER="shardline-trainer"
if [[ $(id -u) -eq 0 ]] && ! getent passwd "$TRAINER_USER" >/dev/null; then
  log "creating the system user $TRAINER_USER (worker --trainer_user)"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    --user-group "$TRAINER_USER"
fi

# The venv: python3 from PATH; python3-venv (Debian) is only needed for Debian's own python.
venv="$here/.venv"
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  log "creating $venv with torch==$TORCH_VERSION (first time: a few minutes)"
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" numpy safetensors pyyaml
fi

# The Python client: its dependencies, then the package (stubs generated from proto/ by its build).
# setuptools stays below 82 because torch 2.11 requires that (grpcio-tools would pull a newer one).
# kubernetes-validate is pinned: its version decides which Kubernetes schemas it ships.
KUBERNETES_VALIDATE_VERSION="1.37.0"
# lizard is pinned: its C++ parser decides the function lengths tools/check_sizes.sh enforces.
LIZARD_VERSION="1.24.3"
PY_PACKAGES=(grpcio grpcio-tools pyyaml matplotlib "setuptools<82"
  "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "tensorboard==2.21.0"
  "prometheus-client==0.26.0" "lizard==$LIZARD_VERSION")
if ! "$venv/bin/python" -c "import grpc, grpc_tools, yaml, matplotlib, tensorboard, prometheus_client
import importlib.metadata as m, sys
sys.exit(m.version('kubernetes-validate') != '$KUBERNETES_VALIDATE_VERSION' or
         m.version('lizard') != '$LIZARD_VERSION')" 2>/dev/null; then
  log "installing ${PY_PACKAGES[*]} into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
fi
py_stamp="$(cat python/pyproject.toml python/setup.py python/gen_protos.py python/shardline/*.py \
  proto/*.proto | sha256sum | cut -c1-16)"
stamp_file="$venv/.shardline_python_client"
if [[ "$(cat "$stamp_file" 2>/dev/null)" != "$py_stamp" ]] ||
  ! "$venv/bin/python" -c "import shardline" 2>/dev/null; then
  log "installing the Python client (python/) into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps ./python
  rm -rf python/build python/*.egg-info
  echo "$py_stamp" > "$stamp_file"
fi

# Hugging Face interop and data preparation (see the header).
HF_PACKAGES=("transformers==5.24.0" "tokenizers==0.23.3" "sentencepiece==0.2.3")
if ! "$venv/bin/python" -c "
import sys, transformers, tokenizers, sentencepiece
sys.exit(0 if (transformers.__version__, tokenizers.__version__, sentencepiece.__version__) ==
         ('5.24.0', '0.23.3', '0.2.3') else 1)" 2>/dev/null; then
  log "installing ${HF_PACKAGES[*]} into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${HF_PACKAGES[@]}"
fi

# Machine-specific Bazel settings live outside version control.
cache_dir="${SHARDLINE_BAZEL_CACHE:-$HOME/.cache/shardline/bazel-disk}"
mkdir -p "$cache_dir"
cat > "$here/.bazelrc.user" <<RC
# Written by tools/setup.sh; machine-specific, not committed.
build --disk_cache=$cache_dir
RC
log "ready"
