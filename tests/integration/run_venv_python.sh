#!/usr/bin/env bash
# Runs a Python test script with the project venv's python (tools/setup.sh installs grpcio and
# grpcio-tools there), for tests of the Python client. The venv is <workspace>/.venv, found from
# this script's real location in the source tree, or $SHARDLINE_VENV.
set -euo pipefail
venv="${SHARDLINE_VENV:-}"
if [[ -z "$venv" ]]; then
  src="$(readlink -f "${BASH_SOURCE[0]}")"
  venv="$(cd "$(dirname "$src")/../.." && pwd)/.venv"
fi
if [[ ! -x "$venv/bin/python" ]]; then
  echo "no python at $venv/bin/python: run tools/setup.sh" >&2
  exit 1
fi
exec "$venv/bin/python" -u "$@"
