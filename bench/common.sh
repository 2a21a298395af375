# Sourced by the bench/*.sh scripts: builds the given Bazel targets and sets BIN (bazel-bin),
# PY (the project venv's python) and REPO. BENCH_BAZEL_STARTUP passes startup options to Bazel
# (for example --output_base=DIR on a shared machine).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || { echo "bench: $PY missing; run tools/setup.sh" >&2; exit 1; }
bench_build() {
  # shellcheck disable=SC2086
  bazel ${BENCH_BAZEL_STARTUP:-} build "$@" >&2
  # shellcheck disable=SC2086
  BIN=$(bazel ${BENCH_BAZEL_STARTUP:-} info bazel-bin 2>/dev/null)
}
