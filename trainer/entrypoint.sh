#!/usr/bin/env bash
# Launches the trainer under torchrun inside a training pod; replaces the tutorial's run.sh.
#
# Usage: entrypoint.sh [--max-restarts N] [--] TRAINER_ARGS...
#
# An elastic job (the operator's elasticPolicy) gets PET_RDZV_ENDPOINT, PET_RDZV_BACKEND,
# PET_NNODES=MIN:MAX and PET_MAX_RESTARTS (plus PET_RDZV_ID and PET_RDZV_CONF when the policy
# sets them): every pod is a torchrun agent of that rendezvous, which assigns node ranks and
# re-forms the group when a node leaves or joins. --max-restarts defaults to PET_MAX_RESTARTS.
#
# Otherwise the rendezvous is passed to torchrun explicitly from what the Kubeflow training
# operator injects: PET_MASTER_ADDR/PET_MASTER_PORT, PET_NNODES, PET_NODE_RANK and
# PET_NPROC_PER_NODE.
# Older operators (v1.6 and earlier) set only MASTER_ADDR/MASTER_PORT, WORLD_SIZE (the number of
# pods) and RANK (the pod's index), which torchrun itself ignores: without PET_NNODES the node
# count and rank come from those. The script says which source it used.
# torchrun is exec'd so it receives the pod's SIGTERM directly and its exit code is ours. It runs
# as `python3 -m trainer.launch` (TRAINER_PYTHON overrides the interpreter): torchrun's own
# launcher, which exits with the trainer's code (2 refused, 143 stopped by SIGTERM with a
# checkpoint committed) where `torchrun` would exit 1, so a restart policy can tell them apart.
set -euo pipefail

die() {
  echo "entrypoint.sh: error: $*" >&2
  exit 2
}

max_restarts=${PET_MAX_RESTARTS:-0}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --max-restarts)
      [[ $# -ge 2 ]] || die "--max-restarts needs a value (an integer >= 0)"
      max_restarts=$2
      shift 2
      ;;
    --max-restarts=*)
      max_restarts=${1#*=}
      shift
      ;;
    --)
      shift
      break
      ;;
    *)
      break
      ;;
  esac
done
[[ $max_restarts =~ ^[0-9]+$ ]] || die "--max-restarts must be an integer >= 0, got '$max_restarts'"

# The directory holding the `trainer` package: /opt/pytorch-distributed in the image, the
# repository root in a checkout.
app_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="${app_dir}${PYTHONPATH:+:${PYTHONPATH}}"

if [[ -n ${PET_RDZV_ENDPOINT:-} ]]; then
  [[ ${PET_NNODES:-} =~ ^[1-9][0-9]*(:[1-9][0-9]*)?$ ]] ||
    die "PET_NNODES must be N or MIN:MAX (nodes, >= 1) with PET_RDZV_ENDPOINT, got '${PET_NNODES:-}'"
  nproc_per_node=${PET_NPROC_PER_NODE:-1}
  rdzv_backend=${PET_RDZV_BACKEND:-c10d}
  rdzv=(--rdzv-backend "$rdzv_backend" --rdzv-endpoint "$PET_RDZV_ENDPOINT")
  [[ -z ${PET_RDZV_ID:-} ]] || rdzv+=(--rdzv-id "$PET_RDZV_ID")
  [[ -z ${PET_RDZV_CONF:-} ]] || rdzv+=(--rdzv-conf "$PET_RDZV_CONF")
  # torch >= 2.4 lets the trainers share the rendezvous agent's TCP store, but its rank 0 keeps
  # the store address of its first round: a node that joins a later round (a lost pod coming
  # back) waits forever for an address nobody publishes. Without the sharing, every round's
  # rank 0 publishes a fresh one.
  export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
  echo "entrypoint.sh: torchrun elastic nnodes=$PET_NNODES nproc_per_node=$nproc_per_node" \
    "rendezvous=$rdzv_backend@$PET_RDZV_ENDPOINT max_restarts=$max_restarts" \
    "(from the operator's elasticPolicy: PET_NNODES/PET_RDZV_*)" >&2
  exec "${TRAINER_PYTHON:-python3}" -m trainer.launch \
    --nnodes "$PET_NNODES" \
    --nproc-per-node "$nproc_per_node" \
    "${rdzv[@]}" \
    --max-restarts "$max_restarts" \
    -m trainer "$@"
fi

if [[ -n ${PET_NNODES:-} ]]; then
  nnodes=$PET_NNODES
  node_rank=${PET_NODE_RANK:-0}
  source="PET_NNODES/PET_NODE_RANK"
elif [[ -n ${WORLD_SIZE:-} || -n ${RANK:-} ]]; then
  [[ ${WORLD_SIZE:-} =~ ^[1-9][0-9]*$ ]] ||
    die "WORLD_SIZE must be the number of pods (an integer >= 1) when PET_NNODES is unset," \
      "got '${WORLD_SIZE:-}'"
  if ! [[ ${RANK:-} =~ ^[0-9]+$ ]] || ((RANK >= WORLD_SIZE)); then
    die "RANK must be the pod's index (0..$((WORLD_SIZE - 1))) when PET_NNODES is unset," \
      "got '${RANK:-}'"
  fi
  nnodes=$WORLD_SIZE
  node_rank=$RANK
  source="WORLD_SIZE/RANK (an operator without PET_NNODES)"
else
  nnodes=1
  node_rank=0
  source="defaults (no PET_NNODES, WORLD_SIZE or RANK: one node)"
fi
nproc_per_node=${PET_NPROC_PER_NODE:-1}
master_addr=${PET_MASTER_ADDR:-${MASTER_ADDR:-}}
master_port=${PET_MASTER_PORT:-${MASTER_PORT:-}}
if [[ -z $master_addr || -z $master_port ]]; then
  [[ $nnodes == 1 ]] || die "PET_MASTER_ADDR/PET_MASTER_PORT (or MASTER_ADDR/MASTER_PORT) must" \
    "be set when PET_NNODES is $nnodes"
  master_addr=${master_addr:-127.0.0.1}
  master_port=${master_port:-29500}
fi

echo "entrypoint.sh: torchrun nnodes=$nnodes node_rank=$node_rank nproc_per_node=$nproc_per_node" \
  "master=$master_addr:$master_port max_restarts=$max_restarts (nodes and rank from $source)" >&2
exec "${TRAINER_PYTHON:-python3}" -m trainer.launch \
  --nnodes "$nnodes" \
  --node-rank "$node_rank" \
  --nproc-per-node "$nproc_per_node" \
  --master-addr "$master_addr" \
  --master-port "$master_port" \
  --max-restarts "$max_restarts" \
  -m trainer "$@"
