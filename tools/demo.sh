#!/usr/bin/env bash
# The README's main command: installs what is missing, builds (showing Bazel's progress), starts
# a local cluster (a coordinator with its web dashboard and two worker daemons with two CPU slots
# each), submits a tiny GPT on the shipped tiny Shakespeare corpus with HYBRID_SHARD degree 2
# over 4 ranks, prints the dashboard's address, shows live progress, prints a text sample and the
# checkpoint list, and shuts the cluster down.
#
#   tools/demo.sh [--keep] [shardctl submit arguments...]
#
# --keep leaves the cluster (and its dashboard) up at the end and prints how to look around and
# how to stop it. Other arguments go to `shardctl submit`, e.g.  tools/demo.sh --set train.steps=50
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
keep=0
submit_args=()
for a in "$@"; do
  if [[ "$a" == "--keep" ]]; then keep=1; else submit_args+=("$a"); fi
done

bash tools/setup.sh
mkdir -p out
build_log="$here/out/demo-build.log"
echo "== building (the first build takes a while; full log in out/demo-build.log)"
# Bazel's progress lines ("[123 / 456] Compiling ...", at most one every 5 s) and errors reach
# the screen; compiler warnings only the log.
set +e
bazel build --curses=no --show_progress_rate_limit=5 \
  //coordinator:coordinator //worker:worker //trainer:trainer //cli:shardctl 2>&1 \
  | tee "$build_log" \
  | grep --line-buffered -E "^\[[0-9,]+ / [0-9,]+\]|^(ERROR|FAILED)|^INFO: (Elapsed|Build completed)" \
  | uniq
build_rc=${PIPESTATUS[0]}
set -e
if ((build_rc != 0)); then
  echo "== build failed (exit $build_rc); the end of out/demo-build.log:"
  tail -40 "$build_log"
  exit "$build_rc"
fi
bin="$(bazel info bazel-bin 2>/dev/null)"
shardctl="$bin/cli/shardctl"
state="$here/.cluster"

echo "== starting a local cluster: 1 coordinator, 2 workers x 2 CPU slots"
# A cluster already running in .cluster (`shardctl cluster up`, or an earlier `demo.sh --keep`)
# is left alone: stopping it would end its jobs. `cluster up` refuses it, naming it.
if ! "$shardctl" cluster up --state_dir="$state" --workers=2 --slots=2; then
  echo "== a local cluster may already be running in $state; to stop it (its jobs end):"
  echo "   bazel-bin/cli/shardctl cluster down"
  exit 1
fi
if ((keep == 0)); then
  trap '"$shardctl" cluster down --state_dir="$state" || true' EXIT
fi
"$shardctl" workers --state_dir="$state"

echo "== submitting examples/tiny_gpt_shakespeare.yaml (tiny GPT, HYBRID_SHARD degree 2, 4 ranks)"
# Checkpoints every 100 steps (the last two kept) under out/checkpoints/<job id>.
job="$("$shardctl" submit examples/tiny_gpt_shakespeare.yaml --state_dir="$state" \
  --set checkpoint.dir="$here/out/checkpoints" --set checkpoint.every_steps=100 \
  --set checkpoint.keep_last=2 --set checkpoint.save_final=true ${submit_args[@]+"${submit_args[@]}"})"
echo "job $job"
# The dashboard (loopback only): the link logs the browser in once (the token then lives in an
# HttpOnly cookie) and opens the job's page.
token=""
dashboard="$(sed -n 's/.*"dashboard_address": "\([^"]*\)".*/\1/p' "$state/cluster.json")"
if [[ -n "$dashboard" ]]; then
  token="$(head -n1 "$state/coordinator/user.token")"
  echo "== dashboard: http://$dashboard/job?id=$job&token=$token"
fi
rc=0
"$shardctl" watch "$job" --state_dir="$state" || rc=$?

echo "== status"
"$shardctl" status "$job" --state_dir="$state" || true
echo "== checkpoints"
"$shardctl" checkpoints "$job" --state_dir="$state" || true
if ((keep == 1)); then
  # .cluster is shardctl's default --state_dir: from the repository root no flag is needed.
  cat <<EOM
== the cluster is still up (--keep); from $here:
  dashboard:   http://$dashboard/login (token: $token; or paste http://$dashboard/?token=$token
               into the address bar)
  jobs:        bazel-bin/cli/shardctl list
  this job:    bazel-bin/cli/shardctl status $job
               bazel-bin/cli/shardctl logs $job --all
               bazel-bin/cli/shardctl metrics $job
  another job: bazel-bin/cli/shardctl submit examples/tiny_gpt_shakespeare.yaml
  stop it:     bazel-bin/cli/shardctl cluster down
EOM
fi
exit $rc
