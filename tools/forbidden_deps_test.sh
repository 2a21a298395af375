#!/usr/bin/env bash
# Fails when a genquery's output (one label per line) holds a forbidden label.
#   $1: the genquery output file   $2: what it lists (for the message)   $3...: extended regexes
# Used by forbidden_deps_test (tools/deps_test.bzl), which states each package's rule.
set -euo pipefail
DEPS="$1"
WHAT="$2"
shift 2
[[ -s "$DEPS" ]] || { echo "FAIL: $DEPS is empty: the query found nothing to check" >&2; exit 1; }
bad=0
for pattern in "$@"; do
  if hits=$(grep -E -- "$pattern" "$DEPS"); then
    echo "FAIL: $WHAT depends on $(echo "$hits" | wc -l) label(s) matching '$pattern', e.g.:" >&2
    echo "$hits" | head -10 | sed 's/^/  /' >&2
    bad=1
  fi
done
[[ $bad -eq 0 ]] || exit 1
echo "ok: $(wc -l <"$DEPS") labels in $WHAT, none matching: $*"
