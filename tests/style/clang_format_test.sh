#!/usr/bin/env bash
# Every C++ file of the tree (tracked or new, outside third_party/) is formatted as .clang-format
# says. Prints each offending file with the first lines clang-format would change.
set -uo pipefail
workspace_file="$(readlink -f "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shardline}/WORKSPACE" 2>/dev/null \
  || readlink -f WORKSPACE)"
root="$(dirname "$workspace_file")"
if [[ ! -f "$root/.clang-format" ]]; then
  echo "cannot find the source tree (resolved WORKSPACE to '$workspace_file')"; exit 1
fi
if ! command -v clang-format >/dev/null; then
  echo "clang-format is not installed (tools/setup.sh installs it)"; exit 1
fi
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cc' '*.h' \
    | grep -v '^third_party/' | while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
else
  mapfile -t files < <(find . -path ./third_party -prune -o -path './bazel-*' -prune \
    -o -path ./.venv -prune -o \( -name '*.cc' -o -name '*.h' \) -print | sed 's|^\./||')
fi
if ((${#files[@]} == 0)); then echo "no C++ files found under $root"; exit 1; fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run tools/format.sh)"
    diff -u "$f" <(clang-format --style=file "$f") | sed -n '3,14p'
    bad=$((bad + 1))
  fi
done
echo "checked ${#files[@]} C++ files under $root: $bad not formatted"
((bad == 0))
