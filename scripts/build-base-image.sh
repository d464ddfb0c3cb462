#!/usr/bin/env bash
# Builds the stand-in for the NGC PyTorch base image with podman, from Debian's packages and the
# project's torch/numpy pins, and prints its reference. Cached: the tag is a hash of everything
# that goes in (this script, the Debian suite, the pins), so a rebuild happens only when one of
# them changes.
#
#   scripts/build-base-image.sh              # -> localhost/pytorch-distributed-base:<hash>
#   scripts/build-base-image.sh --print-if-built   # its name if podman has it, else exit 1
#
# The image is a debootstrap'd minimal bookworm with python3 and a virtual environment in
# /opt/venv (on PATH, so `torchrun` is there as in the NGC image) holding torch and numpy, boto3,
# prometheus-client and tensorboardX (with protobuf), which trainer/Dockerfile installs, and scikit-learn, which examples/digits/Dockerfile installs
# (so their pip finds them there and an image built on it needs no network).
# The PyPI torch for Linux is a CUDA build: it cannot import without its nvidia-* wheels (about
# 2.7 GB installed), so they are in, and the image is about 4 GB like the NGC one. The script
# checks `import torch` and a gloo all-reduce inside the image before tagging it. Run it as root
# (debootstrap and chroot need it).
#
#   PYTHON         interpreter whose pip downloads the wheels (default .venv/bin/python)
#   DEBIAN_SUITE   default bookworm (Python 3.11, like the project's venv)
#   DEBIAN_MIRROR  default http://deb.debian.org/debian
set -euo pipefail
# shellcheck source=scripts/container-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/container-env.sh"
cd "$repo_root"

python=${PYTHON:-.venv/bin/python}
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
pins=$(grep -E '^(torch|numpy|boto3|scikit-learn|prometheus-client|tensorboardX|protobuf)==' \
  requirements-dev.txt | sort)
[[ $(wc -l <<<"$pins") -eq 7 ]] || {
  echo "build-base-image.sh: requirements-dev.txt must pin torch==, numpy==, boto3==," \
    "scikit-learn==, prometheus-client==, tensorboardX== and protobuf==" >&2
  exit 2
}
inputs_hash=$(printf '%s\n' "$(cat "${BASH_SOURCE[0]}")" "$suite" "$pins" | sha256sum | cut -c1-16)
image=localhost/pytorch-distributed-base:$inputs_hash

if [[ ${1:-} == --print-if-built ]]; then
  command -v podman >/dev/null 2>&1 && "${podman[@]}" image exists "$image" && echo "$image"
  exit
fi
need_commands podman:podman runc:runc debootstrap:debootstrap
if "${podman[@]}" image exists "$image"; then
  echo "$image"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || {
  echo "build-base-image.sh: run as root (debootstrap and chroot need it), or pass your own" \
    "BASE_IMAGE to scripts/build-image.sh" >&2
  exit 2
}
# One build at a time (CI's background build, the e2e workers, a developer's make): the others
# wait, then find the image the first one tagged.
exec 8>"${TMPDIR:-/var/tmp}/pytorch-distributed-base-image.lock"
if ! flock --nonblock 8; then
  echo "base image: another build of it is running; waiting for it" >&2
  flock 8
fi
if "${podman[@]}" image exists "$image"; then
  echo "$image"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/var/tmp}/base-image.XXXXXX")
candidate=localhost/pytorch-distributed-base:candidate-$inputs_hash
cleanup() {
  rm -rf "$work"
  "${podman[@]}" rmi --force "$candidate" >/dev/null 2>&1 || true
}
trap cleanup EXIT
rootfs=$work/rootfs
wheels=$rootfs/tmp/wheels

echo "base image: debootstrap $suite" >&2
debootstrap --variant=minbase --include=python3,python3-venv "$suite" "$rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || {
  tail -20 "$work/debootstrap.log" >&2
  exit 1
}

echo "base image: wheels for $(tr '\n' ' ' <<<"$pins")" >&2
mkdir -p "$wheels"
# The pins with every dependency, CUDA runtime wheels included: the PyPI torch for Linux links
# libtorch_cuda.so (and through it cudart, cuBLAS, cuDNN, NCCL, ...) into torch._C, so it does
# not import without them, not even on the CPU.
# shellcheck disable=SC2086 # one pin per word
"$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
  -d "$wheels" $pins

echo "base image: /opt/venv" >&2
chroot "$rootfs" /usr/bin/python3 -m venv /opt/venv
wheel_files=("$wheels"/*.whl)
chroot "$rootfs" /opt/venv/bin/python -m pip install --quiet --disable-pip-version-check \
  --no-index --no-deps "${wheel_files[@]#"$rootfs"}"
rm -rf "$wheels" "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/locale

echo "base image: import as $image" >&2
tar -C "$rootfs" --numeric-owner -cf - . | "${podman[@]}" import \
  --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --message "pytorch-distributed base: debootstrap $suite + $(tr '\n' ' ' <<<"$pins")" \
  - "$candidate" >/dev/null
# Tag only an image whose torch imports and can run a collective on the CPU.
"${podman[@]}" run --rm --network none "$candidate" python -c '
import tempfile
import torch
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
t = torch.ones(2)
dist.all_reduce(t)
print("torch", torch.__version__, "cuda build", torch.version.cuda, "sum", t.tolist())
' >&2
"${podman[@]}" tag "$candidate" "$image"
"${podman[@]}" untag "$image" "$candidate"
# Base images of earlier inputs are about 5 GB each: drop those no image or container still uses.
"${podman[@]}" images --format '{{.Repository}}:{{.Tag}}' localhost/pytorch-distributed-base |
  grep -vxF "$image" | xargs -r "${podman[@]}" rmi >/dev/null 2>&1 || true
echo "$image"
