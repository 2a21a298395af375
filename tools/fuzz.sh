#!/usr/bin/env bash
# Builds the libFuzzer targets (//fuzz:*_fuzzer, --config=fuzz: clang + libFuzzer + ASan + UBSan,
# in their own Bazel output base) and runs each for a set time. Any crash, sanitizer report,
# leak, timeout or out-of-memory input fails the run; libFuzzer saves the input under
# fuzz/regressions/<target>/, where //fuzz:<target>_replay_test (part of tools/test.sh) replays
# it from then on. See fuzz/README.md.
#
#   tools/fuzz.sh                 every target, 300 s each
#   tools/fuzz.sh 60              every target, 60 s each
#   tools/fuzz.sh 60 manifest     only these targets
#   tools/fuzz.sh --merge 60      afterwards, add the inputs that found new coverage to the
#                                 committed corpus (fuzz/corpus/<target>/, kept minimal)
#
# New inputs go to a working corpus outside the repository ($FUZZ_WORK_DIR, default
# ~/.cache/shardline/fuzz/<target>), kept between runs.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

merge=0
seconds=300
targets=()
for arg in "$@"; do
  case "$arg" in
    --merge) merge=1 ;;
    ''|*[!0-9]*) targets+=("$arg") ;;
    *) seconds="$arg" ;;
  esac
done
((${#targets[@]})) || targets=(job_spec manifest checkpoint_reader safetensors rendezvous)

command -v clang >/dev/null || { echo "clang not found (tools/setup.sh installs clang-14)"; exit 1; }
output_base="${FUZZ_OUTPUT_BASE:-$HOME/.cache/bazel-ob/fuzz}"
work="${FUZZ_WORK_DIR:-$HOME/.cache/shardline/fuzz}"

labels=()
for t in "${targets[@]}"; do labels+=("//fuzz:${t}_fuzzer"); done
echo "building ${labels[*]} (--config=fuzz, output base $output_base)"
mkdir -p "$work"
if ! bazel --output_base="$output_base" build --config=fuzz "${labels[@]}" >"$work/build.log" 2>&1; then
  grep -E "^(ERROR|FAILED)|error:" "$work/build.log" | head -40
  echo "fuzz build failed (log: $work/build.log)"
  exit 1
fi
bin="$(bazel --output_base="$output_base" info --config=fuzz bazel-bin 2>/dev/null)"

failed=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "fuzz/regressions/$t"
  log="$work/$t.log"
  echo "== $t: ${seconds}s"
  # -timeout: one input taking longer than 10 s is a hang; -rss_limit_mb: an input that makes
  # the target allocate without bound is a bug too. Artifacts (crash-*, leak-*, timeout-*,
  # oom-*) land in fuzz/regressions/<t>/.
  (cd "$work" && ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" \
    "$bin/fuzz/${t}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$here/fuzz/regressions/$t/" \
      "$work/$t" "$here/fuzz/corpus/$t") >"$log" 2>&1
  rc=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)" "$log" | tr '\n' ' '
  echo
  if [[ $rc -ne 0 ]]; then
    echo "FAILED: $t (exit $rc); last lines of $log:"
    tail -40 "$log"
    failed+=("$t")
  elif ((merge)); then
    "$bin/fuzz/${t}_fuzzer" -merge=1 "$here/fuzz/corpus/$t" "$work/$t" >"$work/$t.merge.log" 2>&1 ||
      { echo "merge of $t failed (see $work/$t.merge.log)"; failed+=("$t-merge"); }
  fi
done

if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}; inputs saved under fuzz/regressions/"
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s) ran ${seconds}s each without a crash"
