#!/usr/bin/env bash
# Checks the size rule of issue #29 on the production C++ sources: every file at most 600 lines,
# every function at most 100 lines (lizard's "length": first to last line of the function).
# Production files are the .cc and .h files of the tree outside third_party/, except tests and
# benchmarks: *_test.cc, *_bench_main.cc, *_load_main.cc, and anything under a bench/, fuzz/,
# tests/ or testing/ folder (at any depth).
# Prints one line per rule, "PASS: ..." or "FAIL: ... <offenders>", and exits 1 if any rule fails,
# like tools/check_deps.sh; tools/test.sh runs it on whole-tree runs and counts each rule as one
# test case. A control line shows that lizard measures a planted 101-line function, so an empty
# answer from it means what it says.
#
#   tools/check_sizes.sh              the tree this script is in
#   tools/check_sizes.sh --root DIR   the tree at DIR
#   tools/check_sizes.sh --selftest   plants offenders in a temp dir; exits 1 if the check misses
#                                     one
#
# lizard comes from the project venv (tools/setup.sh), found from this script's real location, or
# $SHARDLINE_VENV; $LIZARD overrides the command.
set -uo pipefail

MAX_FILE_LINES=600
MAX_FUNCTION_LINES=100
OVER_FILE=$((MAX_FILE_LINES + 1))
OVER_FUNCTION=$((MAX_FUNCTION_LINES + 1))

script="$(readlink -f "${BASH_SOURCE[0]}")"
repo="$(cd "$(dirname "$script")/.." && pwd)"
LIZARD="${LIZARD:-${SHARDLINE_VENV:-$repo/.venv}/bin/lizard}"

# The production C++ files under $1, one per line, relative to it, sorted.
production_files() {
  (cd "$1" && find . \( -name 'third_party' -o -name '.?*' -o -name 'bazel-*' -o -name 'bench' \
    -o -name 'fuzz' -o -name 'tests' -o -name 'testing' \) -prune -o -type f \
    \( -name '*.cc' -o -name '*.h' \) ! -name '*_test.cc' ! -name '*_bench_main.cc' \
    ! -name '*_load_main.cc' -print) | sed 's|^\./||' | LC_ALL=C sort
}

# Prints "file:line: name (N lines)" for each function over the limit in the files named on
# stdin (relative to $1). Fails if lizard does.
long_functions() {
  local out
  # -i -1: exit 0 whatever the warnings; only a failure of lizard itself is an error. The CCN and
  # argument thresholds are out of reach, so the length is the only reason for a warning.
  out="$(cd "$1" && "$LIZARD" -l cpp -L "$MAX_FUNCTION_LINES" -C 1000000 -a 1000000 -i -1 -w \
    -f /dev/stdin)" || return 1
  # "file:line: warning: name has N NLOC, N CCN, N token, N PARAM, N length, N ND" -> "N file:line:
  # name".
  local n='[0-9]+'
  local warning="^(.*:$n): warning: (.*) has $n NLOC, $n CCN, $n token, $n PARAM, ($n) length.*\$"
  sed -n -E "s/$warning/\\3 \\1: \\2/p" <<<"$out" | awk -v max="$MAX_FUNCTION_LINES" '$1 > max {
      n = $1; $1 = ""; sub(/^ /, ""); printf "%s (%d lines)\n", $0, n }'
}

# stdin's lines joined by ", ".
join_lines() { awk 'NR > 1 { printf ", " } { printf "%s", $0 }'; }

# Runs the check on the tree at $1.
check() {
  local root="$1" failed=0 files long_files=() f n
  files="$([[ -d "$root" ]] && production_files "$root")"
  if [[ -z "$files" ]]; then
    echo "FAIL: no production C++ files found under $root (the rules below prove nothing)"
    return 1
  fi
  local count
  count="$(wc -l <<<"$files")"

  while IFS= read -r f; do
    if ! n="$(awk 'END { print NR }' "$root/$f")"; then
      long_files+=("$f (unreadable)")
    elif ((n > MAX_FILE_LINES)); then
      long_files+=("$f ($n lines)")
    fi
  done <<<"$files"
  if ((${#long_files[@]})); then
    echo "FAIL: production C++ files have at most $MAX_FILE_LINES lines; but: $(
      printf '%s\n' "${long_files[@]}" | join_lines)"
    failed=1
  else
    echo "PASS: production C++ files have at most $MAX_FILE_LINES lines ($count files)"
  fi

  # Control: lizard runs and measures a planted function of MAX_FUNCTION_LINES + 1 lines.
  local control
  control="$(mktemp -d)"
  make_function "$control/control.cc" "$OVER_FUNCTION"
  if [[ "$(echo control.cc | long_functions "$control")" == *"($OVER_FUNCTION lines)"* ]]; then
    echo "PASS: control: lizard measures a planted $OVER_FUNCTION-line function"
  else
    echo "FAIL: control: lizard ($LIZARD) did not report a planted $OVER_FUNCTION-line function" \
      "(run tools/setup.sh; the function rule proves nothing)"
    failed=1
  fi
  rm -rf "$control"

  local long
  if ! long="$(long_functions "$root" <<<"$files")"; then
    echo "FAIL: production C++ functions have at most $MAX_FUNCTION_LINES lines: lizard failed"
    return 1
  fi
  if [[ -n "$long" ]]; then
    echo "FAIL: production C++ functions have at most $MAX_FUNCTION_LINES lines; but: $(
      join_lines <<<"$long")"
    failed=1
  else
    echo "PASS: production C++ functions have at most $MAX_FUNCTION_LINES lines ($count files)"
  fi
  return $failed
}

# Writes a C++ file $1 holding one function of exactly $2 lines (signature to closing brace).
make_function() {
  {
    echo "int Planted(int x) {"
    for ((i = 0; i < $2 - 2; i++)); do echo "  x += $i;"; done
    echo "}"
  } >"$1"
}

# Writes a C++ file $1 of exactly $2 lines, all in short functions.
make_file() {
  {
    for ((i = 0; i < $2 / 3; i++)); do printf 'int F%d() {\n  return %d;\n}\n' "$i" "$i"; done
    for ((i = 0; i < $2 % 3; i++)); do echo "// filler"; done
  } >"$1"
}

# The check on planted trees: each offender fails its rule, the limits themselves pass, and the
# exempt files are exempt. Prints one line per case; exits 1 if any case went wrong.
selftest() {
  local bad=0
  selftest_dir="$(mktemp -d)"
  trap 'rm -rf "$selftest_dir"' EXIT
  local tmp="$selftest_dir"
  # expect <name> <expected exit> <expected output regex>: runs the check on $tmp/<name>.
  expect() {
    local out rc
    out="$(check "$tmp/$1" 2>&1)"
    rc=$?
    if [[ $rc -eq $2 ]] && grep -q -E -- "$3" <<<"$out"; then
      echo "ok: $1"
    else
      echo "WRONG: $1: exit $rc (want $2), output:"; sed 's/^/  /' <<<"$out"
      echo "  (want a line matching: $3)"
      bad=1
    fi
  }
  plant() { mkdir -p "$(dirname "$tmp/$1")"; "${@:2}"; }
  local files_rule="production C\+\+ files have at most $MAX_FILE_LINES lines"
  local functions_rule="production C\+\+ functions have at most $MAX_FUNCTION_LINES lines"

  # A clean tree: a file of exactly 600 lines and a function of exactly 100 lines.
  plant clean/common/a.cc make_file "$tmp/clean/common/a.cc" "$MAX_FILE_LINES"
  plant clean/spec/b.h make_function "$tmp/clean/spec/b.h" "$MAX_FUNCTION_LINES"
  expect clean 0 "^PASS: $functions_rule \(2 files\)"

  # A 101-line function, in a .cc and in a .h.
  plant long_fn/common/a.cc make_file "$tmp/long_fn/common/a.cc" 30
  plant long_fn/models/deep/f.cc make_function "$tmp/long_fn/models/deep/f.cc" "$OVER_FUNCTION"
  expect long_fn 1 \
    "^FAIL: $functions_rule; but: models/deep/f.cc:1: Planted \($OVER_FUNCTION lines\)$"
  plant long_fn_h/fsdp/f.h make_function "$tmp/long_fn_h/fsdp/f.h" "$OVER_FUNCTION"
  expect long_fn_h 1 "^FAIL: $functions_rule; but: fsdp/f.h:1: Planted"

  # A 601-line file of short functions: the file rule fails, the function rule passes.
  plant long_file/checkpoint/big.cc make_file "$tmp/long_file/checkpoint/big.cc" "$OVER_FILE"
  expect long_file 1 \
    "^FAIL: $files_rule; but: checkpoint/big.cc \($OVER_FILE lines\)$"
  expect long_file 1 "^PASS: $functions_rule"

  # Exempt: tests and benchmarks, however long.
  plant exempt/common/a.cc make_file "$tmp/exempt/common/a.cc" 30
  local f
  for f in common/x_test.cc coordinator/bench/x.cc fsdp/tests/x.cc fsdp/testing/x.h \
    coordinator/dashboard/testing/x.h bench/x.cc fuzz/x.cc tests/smoke/x.cc fsdp/x_bench_main.cc \
    coordinator/bench/x_load_main.cc models/y_load_main.cc third_party/x/x.cc; do
    plant "exempt/$f" make_function "$tmp/exempt/$f" "$OVER_FILE"
  done
  expect exempt 0 "^PASS: $files_rule \(1 files\)"

  # Nothing to check is a failure, never a pass.
  mkdir -p "$tmp/empty/common"
  expect empty 1 "^FAIL: no production C\+\+ files found"

  ((bad)) && echo "FAIL: selftest" || echo "PASS: selftest"
  return $bad
}

case "${1:-}" in
  --selftest) selftest ;;
  --root)
    [[ -d "${2:-}" ]] || { echo "$0: --root needs a directory" >&2; exit 2; }
    check "$(cd "$2" && pwd)" ;;
  "") check "$repo" ;;
  *) echo "usage: $0 [--root DIR | --selftest]" >&2; exit 2 ;;
esac
exit $?
