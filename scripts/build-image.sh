#!/usr/bin/env bash
# Builds the training image from trainer/Dockerfile with podman and prints its reference.
#
#   scripts/build-image.sh [IMAGE]     # default TRAINER_IMAGE of tools/containers/defaults.env
#
#   BASE_IMAGE   the Dockerfile's base; default: the local stand-in for the NGC image that
#                scripts/build-base-image.sh builds (cached), since nvcr.io may be unreachable.
#                Any image with python, torch and numpy and torchrun on PATH works.
#
# Exactly what the stack's TrainingImage builds (same context, Dockerfile and build argument);
# podman's layer cache makes a rebuild with an unchanged trainer/ a few seconds.
set -euo pipefail
# shellcheck source=scripts/container-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/container-env.sh"
cd "$repo_root"

image=${1:-$TRAINER_IMAGE}
need_commands podman:podman runc:runc
base=${BASE_IMAGE:-$(scripts/build-base-image.sh)}
echo "trainer image: $image from trainer/Dockerfile on $base" >&2
"${podman[@]}" build --quiet --network host --build-arg "BASE_IMAGE=$base" \
  -f trainer/Dockerfile -t "$image" trainer >&2
echo "$image"
