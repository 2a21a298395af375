#!/usr/bin/env bash
# Checks the dependency rule of docs/design.md ("Layers and the dependency rule") on the Bazel
# build graph: for each layer package, its production targets (cc_library / cc_binary in the
# package itself, not testonly; test, bench and testing sub-packages are exempt) may depend only
# on the packages the rule allows, and the torch-free layers never reach LibTorch.
# Prints one line per rule, "PASS: ..." or "FAIL: ... <a path that breaks it>", and exits 1 if
# any rule fails. tools/test.sh runs it after the tests and counts each rule as one test case.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OURS=(launch proto common spec data fsdp models checkpoint hf coordinator trainer worker cli)
# package -> the packages (or single targets, written //pkg:target) it may depend on.
declare -A ALLOWED=(
  [launch]=""
  [proto]=""
  [common]="proto"
  [spec]="proto common //fsdp:layout"
  [data]="proto common"
  [fsdp]="proto common"
  [models]="proto common spec data fsdp"
  [checkpoint]="proto common spec data fsdp"
  [hf]="proto common spec //fsdp:layout //models:model_config checkpoint"
  [coordinator]="proto common spec //fsdp:layout checkpoint launch"
  [trainer]="launch proto common spec data fsdp models checkpoint hf coordinator"
  [worker]="launch proto common spec //fsdp:layout coordinator"
  [cli]="proto common spec //fsdp:layout checkpoint hf coordinator"
)
# Layers that must never link LibTorch or CUDA.
TORCH_FREE=(launch proto spec hf coordinator worker cli)

failed=0
errlog="$(mktemp)"
trap 'rm -f "$errlog"' EXIT
# A query that errors is a failed check, never an empty (passing) answer.
q() {
  if ! bazel query --noshow_progress "$1" 2>"$errlog"; then
    echo "FAIL: bazel query failed: $1: $(grep -m1 -i error "$errlog")" >&2
    failed=1
    return 1
  fi
}

for pkg in "${OURS[@]}"; do
  libs="(kind('cc_library|cc_binary', //$pkg:all) except attr(testonly, 1, //$pkg:all))"
  if ! targets="$(q "$libs")" || [[ -z "$targets" ]]; then
    echo "FAIL: $pkg: no production targets found (package missing?)"; failed=1; continue
  fi
  forbidden=""
  allowed=" ${ALLOWED[$pkg]} "
  for other in "${OURS[@]}"; do
    [[ "$other" == "$pkg" ]] && continue
    if [[ "$allowed" == *" $other "* ]]; then continue; fi
    # Single allowed targets of $other (and what they depend on) are carved out.
    carve=""
    for a in ${ALLOWED[$pkg]}; do
      [[ "$a" == //$other:* ]] && carve="$carve except deps($a)"
    done
    forbidden="${forbidden:+$forbidden + }(//$other/... $carve)"
  done
  rule="$pkg may depend on: ${ALLOWED[$pkg]:-nothing of ours}"
  if [[ -n "$forbidden" ]]; then
    if ! bad="$(q "deps($libs) intersect ($forbidden)")"; then
      echo "FAIL: $rule: the query failed"; continue
    fi
    bad="$(head -1 <<<"$bad")"
    if [[ -n "$bad" ]]; then
      echo "FAIL: $rule; but: $(q "somepath($libs, $bad)" | tr '\n' ' ')"
      failed=1; continue
    fi
  fi
  echo "PASS: $rule"
done

# Control: the engine does reach LibTorch, so an empty answer below means what it says.
if path="$(q "somepath(//fsdp:all, @libtorch//...)")" && [[ -n "$path" ]]; then
  echo "PASS: control: the query finds fsdp's path to LibTorch"
else
  echo "FAIL: control: the query found no path from fsdp to LibTorch (the checks below prove nothing)"
  failed=1
fi
for pkg in "${TORCH_FREE[@]}"; do
  libs="(kind('cc_library|cc_binary', //$pkg:all) except attr(testonly, 1, //$pkg:all))"
  if ! path="$(q "somepath($libs, @libtorch//... + @cuda//...)")"; then
    echo "FAIL: $pkg links no LibTorch or CUDA: the query failed"; continue
  fi
  path="$(tr '\n' ' ' <<<"$path")"
  if [[ -n "${path// /}" ]]; then
    echo "FAIL: $pkg links no LibTorch or CUDA; but: $path"; failed=1
  else
    echo "PASS: $pkg links no LibTorch or CUDA"
  fi
done
exit $failed
