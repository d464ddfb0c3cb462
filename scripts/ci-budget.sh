#!/usr/bin/env bash
# The CI budget check: .ci/run on a fresh clone as a new CI machine runs it, with every cache
# empty (a new HOME, so uv's package cache, the Go module and build caches and the e2e tool cache
# start empty, and a podman store of its own, so the base image is built again), then once more
# on a second fresh clone with those caches warm. Prints both wall-clock figures beside each
# run's timing table and fails when either is over its budget.
#
#   scripts/ci-budget.sh [--cold-minutes N] [--warm-minutes N] [--keep]
#
# Defaults: cold 50, warm 25 minutes (CI's own limit is 90). Run it as CI runs, as root on an
# otherwise idle machine; it takes about as long as both runs. Debian's packages that a cold CI
# machine installs (podman, etcd, containerd, ...) stay installed here: those installs take a
# minute or two, which the cold figure does not include. --keep leaves the work directory (logs,
# clones, caches: about 20 GB) for a look; by default it is removed.
set -euo pipefail

cold_budget=50
warm_budget=25
keep=false
while (($#)); do
  case $1 in
    --cold-minutes) cold_budget=$2 && shift 2 ;;
    --warm-minutes) warm_budget=$2 && shift 2 ;;
    --keep) keep=true && shift ;;
    *)
      echo "usage: scripts/ci-budget.sh [--cold-minutes N] [--warm-minutes N] [--keep]" >&2
      exit 2
      ;;
  esac
done
for budget in "$cold_budget" "$warm_budget"; do
  [[ $budget =~ ^[1-9][0-9]*$ ]] || {
    echo "ci-budget.sh: a budget is a whole number of minutes, not '$budget'" >&2
    exit 2
  }
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/ci-budget.XXXXXX")
# A failed run's work directory stays, for its logs.
trap '$keep || [[ -e $work/failed ]] || rm -rf "$work"' EXIT
mkdir -p "$work/home" "$work/containers/storage" "$work/containers/run"
# The clones sit beside a link to ../shared, as the checkout does, for the vendored sources.
[[ -d $repo/../shared ]] && ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"
cat >"$work/containers/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$work/containers/storage"
runroot = "$work/containers/run"
CONF

# One run of .ci/run on a fresh clone of HEAD; prints its wall-clock seconds last.
ci_run() {
  local name=$1 clone=$work/$1 began=$SECONDS status=0
  git clone -q "$repo" "$clone"
  echo "ci-budget.sh: $name run of .ci/run in $clone (log: $work/$name.log)" >&2
  (
    cd "$clone"
    env -u XDG_CACHE_HOME -u GOPATH -u GOCACHE -u GOMODCACHE -u PIP_CACHE_DIR -u UV_CACHE_DIR -u PD_E2E_CACHE \
      HOME="$work/home" CONTAINERS_STORAGE_CONF="$work/containers/storage.conf" CI=true \
      bash .ci/run
  ) >"$work/$name.log" 2>&1 || status=$?
  sed -n '/== CI timings/,$p' "$work/$name.log" >&2
  ((status == 0)) || {
    echo "ci-budget.sh: the $name run failed (exit $status); its log's end:" >&2
    tail -n 60 "$work/$name.log" >&2
    touch "$work/failed"
    exit 1
  }
  echo $((SECONDS - began))
}

cold=$(ci_run cold)
warm=$(ci_run warm)
verdict=0
report() {
  local name=$1 seconds=$2 budget=$3 state=within
  ((seconds > budget * 60)) && state=OVER && verdict=1
  printf 'ci-budget.sh: %-4s %3d min %02d s (budget %d min): %s\n' \
    "$name" $((seconds / 60)) $((seconds % 60)) "$budget" "$state"
}
report cold "$cold" "$cold_budget"
report warm "$warm" "$warm_budget"
exit "$verdict"
