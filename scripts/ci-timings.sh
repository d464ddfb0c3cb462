#!/usr/bin/env bash
# Sourced by .ci/run: each phase's seconds and whether its caches were cold, printed as a table
# at the end of every run, green or red, so a slow phase shows in the run that made it slow.
#
# Rows are `PHASE<TAB>SECONDS<TAB>STATE` lines in $PD_TIMINGS_FILE. The phases of .ci/run write
# theirs here; scripts/e2e-tools.sh adds one per tool (built or cached),
# scripts/build-base-image.sh one for the base image, and the e2e suite one per module
# (tests/e2e/conftest.py), so the table goes down to what took the time.

timings_start() {
  export PD_TIMINGS_FILE=${PD_TIMINGS_FILE:-$(mktemp --suffix=.tsv)}
  : >"$PD_TIMINGS_FILE"
  timings_started=$SECONDS
  timings_children=()
  trap timings_report EXIT
}

# cold or cached, for what a phase reads: uv's package cache (make venv), the e2e tools' cache,
# podman's store for the base image.
timings_cache_state() {
  case $1 in
    # torch's wheel alone is over 500 MB (uv's default cache; UV_CACHE_DIR moves it).
    # No cache directory yet (a new HOME) is 0 MB: cold.
    uv)
      local megabytes
      megabytes=$(du -sm "${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uv}" 2>/dev/null | cut -f1)
      ((${megabytes:-0} > 1000)) && echo cached || echo cold ;;
    e2e-tools) [[ -x $(scripts/e2e-tools.sh --print)/pulumi ]] && echo cached || echo cold ;;
    base-image) scripts/build-base-image.sh --print-if-built >/dev/null 2>&1 && echo cached || echo cold ;;
  esac
}

timings_row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$PD_TIMINGS_FILE"; }

# timings_phase NAME STATE COMMAND...: run it in the foreground and record its seconds; a
# failure records FAILED and ends the run with its exit status.
timings_phase() {
  local name=$1 state=$2 began=$SECONDS status=0
  shift 2
  echo "== ${name} ==" >&2
  "$@" || status=$?
  timings_row "$name" $((SECONDS - began)) "$([[ $status -eq 0 ]] && echo "$state" || echo "FAILED ($state)")"
  return "$status"
}

# timings_background NAME STATE LOG COMMAND...: start it with its output in LOG; $! is its pid
# for timings_wait. It records its own seconds when it ends, not when it is waited for.
timings_background() {
  local name=$1 state=$2 log=$3
  shift 3
  echo "== ${name}: started in the background (log: $log) ==" >&2
  set -m # a process group of its own, which timings_report can stop whole
  (
    began=$SECONDS
    status=0
    "$@" >"$log" 2>&1 || status=$?
    timings_row "$name (background)" $((SECONDS - began)) \
      "$([[ $status -eq 0 ]] && echo "$state" || echo "FAILED ($state)")"
    exit "$status"
  ) &
  set +m
  timings_children+=($!)
}

# timings_wait NAME PID LOG: wait for a background phase (its log's last line once a minute),
# then show its whole log; its failure ends the run.
timings_wait() {
  local name=$1 pid=$2 log=$3 waited=0 status=0
  echo "== ${name}: waiting for it ==" >&2
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    waited=$((waited + 5))
    ((waited % 60 == 0)) && echo "   ... ${name}: $(tail -n 1 "$log")" >&2
  done
  wait "$pid" || status=$?
  cat "$log" >&2
  [[ $status -eq 0 ]] || echo "== ${name}: FAILED (exit $status) ==" >&2
  return "$status"
}

timings_report() {
  local status=$? pid
  for pid in ${timings_children[@]+"${timings_children[@]}"}; do
    kill -- -"$pid" 2>/dev/null || true
  done
  {
    echo
    echo "== CI timings: seconds per phase; cold = its caches were empty, cached = reused =="
    # A tool is looked up again by `make e2e` and by the suite: its first row says what it cost.
    awk -F'\t' '!seen[$1]++ { printf "  %-58s %6s  %s\n", $1, $2, $3 }' "$PD_TIMINGS_FILE"
    printf '  %-58s %6s  %s\n' "total (wall clock)" $((SECONDS - timings_started)) \
      "$([[ $status -eq 0 ]] && echo passed || echo "FAILED (exit $status)")"
  } >&2
  return "$status"
}
