# Sourced by the trainer's multi-process shell tests: runs W trainer processes on loopback as
# torchrun would start them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free
# port), waits for all of them, and reports every rank that failed with the tail of its log.
#
#   source trainer/testing/ranks.sh   # needs TRAINER, FREE_PORT and a `fail MESSAGE` function
#   run_ranks NAME W OUT_PATTERN LOG_PATTERN [VAR=VALUE ...] -- TRAINER_ARGS...
#
# In the patterns and in every TRAINER_ARG, "{r}" stands for the rank: rank r's stdout goes to
# OUT_PATTERN, its stderr to LOG_PATTERN ("/dev/null" discards). VAR=VALUE pairs go into every
# rank's environment. A rank that exits non-zero is reported through `fail` as
# "NAME: rank r of W exited CODE" followed by the last 20 lines of its log.

# run_ranks: see above.
run_ranks() {
  local name=$1 world=$2 out_pattern=$3 log_pattern=$4
  shift 4
  local envs=()
  while [[ $# -gt 0 && $1 != "--" ]]; do
    envs+=("$1")
    shift
  done
  [[ $# -gt 0 ]] && shift  # the "--"
  local port r a code log
  local pids=() args=()
  port="$("$FREE_PORT")"
  # The bootstrap store's secret, shared by the launch's ranks (a caller's own wins).
  local secret="${SHARDLINE_STORE_SECRET:-ranks-$$-$RANDOM$RANDOM}"
  for ((r = 0; r < world; r++)); do
    args=()
    for a in "$@"; do args+=("${a//\{r\}/$r}"); done
    env SHARDLINE_STORE_SECRET="$secret" ${envs[@]+"${envs[@]}"} RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAINER" "${args[@]}" \
      >"${out_pattern//\{r\}/$r}" 2>"${log_pattern//\{r\}/$r}" &
    pids+=($!)
  done
  for ((r = 0; r < world; r++)); do
    code=0
    wait "${pids[$r]}" || code=$?
    if [[ $code -ne 0 ]]; then
      fail "$name: rank $r of $world exited $code"
      log="${log_pattern//\{r\}/$r}"
      [[ -f $log ]] && tail -20 "$log" >&2
    fi
  done
  return 0
}
