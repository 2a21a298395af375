#!/usr/bin/env bash
# Checks the dependency rule of docs/design.md ("Layers and the dependency rule") on the Bazel
# build graph: for each layer package, its production targets (cc_library / cc_binary under it,
# not testonly: test helpers and bench programs are exempt) may depend only on the packages the
# rule allows, and the torch-free layers never reach LibTorch. `--selftest` plants a bad
# dependency and checks that the rule catches it.
# Prints one line per rule, "PASS: ..." or "FAIL: ... <a path that breaks it>", and exits 1 if
# any rule fails. tools/test.sh runs it after the tests and counts each rule as one test case.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Our layer packages. A package's scope is everything under it (//pkg/...) except the packages
# listed here that lie beneath it: coordinator's sub-packages have rows of their own.
OURS=(launch proto common spec data fsdp models checkpoint hf client
  coordinator/state coordinator/observability coordinator/rendezvous coordinator/checkpoints
  coordinator/placement coordinator/auth coordinator/core coordinator/http coordinator/dashboard
  coordinator trainer worker cli)
# The coordinator's parts, as allowed sets (deps() is transitive: a row names every package its
# targets reach, not only the direct ones).
C_STATE="proto common coordinator/state"
C_CORE="$C_STATE spec //fsdp:layout //checkpoint:manifest launch coordinator/observability
  coordinator/rendezvous coordinator/checkpoints coordinator/placement coordinator/core"
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
  [client]="proto common"
  [coordinator/state]="proto common"
  [coordinator/observability]="$C_STATE"
  [coordinator/rendezvous]="proto common"
  [coordinator/checkpoints]="$C_STATE spec //checkpoint:manifest"
  [coordinator/placement]="$C_STATE //fsdp:layout"
  [coordinator/auth]="proto common"
  # The core: neither HTTP nor auth, nor the client, nor the dashboard.
  [coordinator/core]="$C_CORE"
  [coordinator/http]="$C_CORE coordinator/auth"
  [coordinator/dashboard]="$C_CORE coordinator/auth coordinator/http"
  [coordinator]="$C_CORE coordinator/auth coordinator/http coordinator/dashboard"
  [trainer]="launch proto common spec data fsdp models checkpoint hf client"
  [worker]="launch proto common spec //fsdp:layout client"
  [cli]="proto common spec //fsdp:layout checkpoint hf client"
)
# Layers that must never link LibTorch or CUDA.
TORCH_FREE=(launch proto spec hf client coordinator/state coordinator/observability coordinator/rendezvous
  coordinator/checkpoints coordinator/placement coordinator/auth coordinator/core coordinator/http
  coordinator/dashboard coordinator worker cli)

failed=0
errlog="$(mktemp)"
planted=""
trap 'rm -f "$errlog"; [[ -n "$planted" ]] && rm -rf "$planted"' EXIT
# A query that errors is a failed check, never an empty (passing) answer.
q() {
  if ! bazel query --noshow_progress "$1" 2>"$errlog"; then
    echo "FAIL: bazel query failed: $1: $(grep -m1 -i error "$errlog")" >&2
    failed=1
    return 1
  fi
}

# //pkg/... less the OURS packages beneath pkg.
scope() {
  local s="//$1/..."
  for other in "${OURS[@]}"; do
    [[ "$other" == "$1"/* ]] && s="$s except //$other/..."
  done
  echo "($s)"
}
# A package's production targets: its cc_library / cc_binary targets that are not testonly (test
# helpers, testing/ and bench/ targets are testonly, so exempt).
prod() {
  local s; s="$(scope "$1")"
  echo "(kind('cc_library|cc_binary', $s) except attr(testonly, 1, $s))"
}

# --selftest: plants a cc_library in coordinator/core that reaches coordinator/http, and passes
# only if the core's rule then fails naming it (a rule that cannot fail proves nothing).
if [[ "${1:-}" == "--selftest" ]]; then
  planted="coordinator/core/planted_dep_selftest"
  mkdir -p "$planted"
  printf 'cc_library(\n    name = "planted",\n    deps = ["//coordinator/http:http_server"],\n)\n' \
    >"$planted/BUILD"
  libs="$(prod coordinator/core)"
  bad="$(q "deps($libs) intersect //coordinator/http/...")" || exit 1
  if grep -q '^//coordinator/http:http_server$' <<<"$bad"; then
    echo "PASS: selftest: the core's rule catches a planted dependency on coordinator/http"
    exit 0
  fi
  echo "FAIL: selftest: a planted dependency of coordinator/core on coordinator/http went unseen"
  exit 1
fi

for pkg in "${OURS[@]}"; do
  libs="$(prod "$pkg")"
  if ! targets="$(q "$libs")" || [[ -z "$targets" ]]; then
    echo "FAIL: $pkg: no production targets found (package missing?)"; failed=1; continue
  fi
  forbidden=""
  allowed=" $(echo ${ALLOWED[$pkg]}) "
  for other in "${OURS[@]}"; do
    [[ "$other" == "$pkg" ]] && continue
    if [[ "$allowed" == *" $other "* ]]; then continue; fi
    # Single allowed targets of $other (and what they depend on) are carved out.
    carve=""
    for a in ${ALLOWED[$pkg]}; do
      [[ "$a" == //$other:* ]] && carve="$carve except deps($a)"
    done
    forbidden="${forbidden:+$forbidden + }($(scope "$other") $carve)"
  done
  rule="$pkg may depend on: $(echo ${ALLOWED[$pkg]:-nothing of ours})"
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
  libs="$(prod "$pkg")"
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
