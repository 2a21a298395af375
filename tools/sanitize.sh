#!/usr/bin/env bash
# Sanitizer runs (separate from tools/test.sh; each in its own Bazel output base):
#   ASan + UBSan (--config=asan) over the unit and integration tests: every test without the
#     "gpu" tag (//... by default);
#   TSan (--config=tsan) over the coordinator's tests (//coordinator/...).
# Any sanitizer report fails the test that produced it. Known reports inside the uninstrumented
# system libraries are suppressed, each with its reason, in tools/sanitizers/{lsan,tsan}.supp;
# never our own frames.
#
#   tools/sanitize.sh                  both
#   tools/sanitize.sh asan [targets]   only ASan + UBSan (default targets //...)
#   tools/sanitize.sh tsan [targets]   only TSan (default //coordinator/...)
#
# Output bases: $SANITIZE_OUTPUT_BASE_PREFIX-{asan,tsan} (default ~/.cache/bazel-ob/{asan,tsan}).
# Ends with one line per sanitizer: "<name>: N passed, N failed" (test targets).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

which="${1:-all}"
[[ $# -gt 0 ]] && shift
extra=("$@")
prefix="${SANITIZE_OUTPUT_BASE_PREFIX:-$HOME/.cache/bazel-ob/}"

summary=()
rc_all=0

run() {  # name config default_targets...
  local name="$1" config="$2"; shift 2
  local targets=("$@")
  ((${#extra[@]})) && targets=("${extra[@]}")
  local ob="${prefix}${name}"
  local log="/tmp/shardline_sanitize_${name}_$$.log"
  echo "== $name (--config=$config, output base $ob): ${targets[*]}"
  # Suppression files by absolute path (test_env cannot expand %workspace%).
  local env=()
  local reports=""
  if [[ $name == asan ]]; then
    # Tests start real processes (coordinator, workers, trainers) whose stderr the harness keeps
    # in its own files: every process writes its reports to $reports/<kind>.<pid> instead, and
    # any such file fails the run.
    reports="$(mktemp -d /tmp/shardline_asan_reports.XXXXXX)"
    env=(--test_env=ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=0:log_path=$reports/asan"
         --test_env=UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
         --test_env=LSAN_OPTIONS="suppressions=$here/tools/sanitizers/lsan.supp:print_suppressions=0")
  else
    env=(--test_env=TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$here/tools/sanitizers/tsan.supp:print_suppressions=0")
  fi
  bazel --output_base="$ob" test --config="$config" --keep_going --nocache_test_results --build_tests_only \
    --test_tag_filters=-gpu --test_output=errors --test_summary=short "${env[@]}" -- "${targets[@]}" >"$log" 2>&1
  local rc=$?
  grep -E "^(//|ERROR:|FAILED|Executed)|(PASSED|FAILED|TIMEOUT|NO STATUS|FLAKY) in" "$log" |
    grep -v "^INFO" | tail -80
  local passed failed
  passed=$(grep -cE "^//[^ ]+ +(\(cached\) )?PASSED" "$log")
  failed=$(grep -cE "^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FLAKY|FAILED TO BUILD)" "$log")
  if [[ -n "$reports" ]] && compgen -G "$reports/*" >/dev/null; then
    echo "sanitizer reports (from test processes or the processes they started), in $reports:"
    for f in "$reports"/*; do echo "--- $f"; grep -m1 -E "ERROR|runtime error" "$f"; done
    failed=$((failed + 1))
  fi
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; echo "bazel exited $rc (log: $log)"; fi
  [[ $failed -eq 0 ]] || rc_all=1
  summary+=("$name: $passed passed, $failed failed")
  echo "(full log: $log)"
}

case "$which" in
  asan) run asan asan //... ;;
  tsan) run tsan tsan //coordinator/... ;;
  all) run asan asan //...; run tsan tsan //coordinator/... ;;
  *) echo "usage: tools/sanitize.sh [all|asan|tsan] [targets...]"; exit 2 ;;
esac
printf '%s\n' "${summary[@]}"
exit $rc_all
