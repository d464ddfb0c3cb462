#!/usr/bin/env bash
# Builds a stack's image with podman and prints its reference: the trainer image from
# trainer/Dockerfile, or with STACK set, what that stack builds (its image.context, Dockerfile and
# build arguments, as tools/stack_image.py reads them from Pulumi.<stack>.yaml).
#
#   scripts/build-image.sh [IMAGE]             # default TRAINER_IMAGE of tools/containers/defaults.env
#   STACK=digits scripts/build-image.sh [IMAGE]   # default localhost/pytorch-distributed-<stack>:local
#                                                 # (TRAINER_IMAGE for a stack that builds trainer/)
#
#   BASE_IMAGE   the Dockerfile's base; default: the local stand-in for the NGC image that
#                scripts/build-base-image.sh builds (cached), since nvcr.io may be unreachable.
#                Any image with python, torch and numpy and torchrun on PATH works.
#   PYTHON       the interpreter that reads the stack file (default .venv/bin/python)
#
# Exactly what the stack's TrainingImage builds (same context, Dockerfile and build arguments);
# podman's layer cache makes a rebuild with an unchanged context a few seconds.
set -euo pipefail
# shellcheck source=scripts/container-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/container-env.sh"
cd "$repo_root"

need_commands podman:podman runc:runc
if [[ -n ${STACK:-} ]]; then
  python=${PYTHON:-.venv/bin/python}
  # --file DOCKERFILE [--build-arg NAME=VALUE]... CONTEXT, one per line.
  build=()
  while IFS= read -r word; do build+=("$word"); done \
    < <("$python" -m tools.stack_image --stack "$STACK")
  image=${1:-$("$python" -m tools.stack_image --stack "$STACK" --name)}
  what="stack $STACK's image.context ${build[-1]}"
else
  build=(--file trainer/Dockerfile trainer)
  image=${1:-$TRAINER_IMAGE}
  what="trainer/Dockerfile"
fi
base=${BASE_IMAGE:-$(scripts/build-base-image.sh)}
echo "image: $image from $what on $base" >&2
"${podman[@]}" build --quiet --network host --build-arg "BASE_IMAGE=$base" \
  -t "$image" "${build[@]}" >&2
echo "$image"
