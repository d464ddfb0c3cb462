#!/usr/bin/env bash
# The trainer's GPU proof, in one go, on a machine with an NVIDIA GPU (sized to finish within 10
# minutes on one data-center GPU; not yet measured on one): a DDP run of the default task and of a model with a
# 2 GB training state over NCCL, the checkpoint stall against a synchronous save, a SIGKILL and
# a bitwise resume, the trainer's step time against a bare DDP loop, and an FSDP run of a 268M
# parameter model with sharded checkpoints (step time, checkpoint stall and peak memory per rank;
# on several GPUs on 1 rank and on all). Every figure goes to one JSON file (bench/gpu_check.py
# says what each is).
#
# Usage: bench/gpu_check.sh [--out FILE] [--state-mb MB] [--smoke]
#   --out FILE     the figures (default: gpu-check-results.json in the current directory)
#   --state-mb MB  the large model's weights plus momentum (default 2048)
#   --smoke        seconds instead of figures: CI runs this on the CPU to prove the script
#
# What it needs: Python 3.10+ with torch (CUDA build on a GPU machine), numpy and psutil. An image
# with torch (nvcr.io/nvidia/pytorch, the training image) has the first two; whatever is missing
# is installed into bench/.gpu-check-venv from the package index (PIP_INDEX_URL and friends are
# honoured). PYTHON picks the interpreter (default python3).
set -euo pipefail

die() {
  echo "gpu_check.sh: error: $*" >&2
  exit 2
}

out=gpu-check-results.json
state_mb=2048
smoke=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out)
      [[ $# -ge 2 ]] || die "--out needs a file name"
      out=$2
      shift 2
      ;;
    --state-mb)
      [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || die "--state-mb needs a number of megabytes >= 1"
      state_mb=$2
      shift 2
      ;;
    --smoke)
      smoke=(--smoke)
      shift
      ;;
    *)
      die "unknown argument '$1' (allowed: --out FILE, --state-mb MB, --smoke)"
      ;;
  esac
done

out=$(realpath -m -- "$out")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
command -v "$python" >/dev/null || die "no $python on PATH (set PYTHON to an interpreter)"

has() { "$python" -c "import $1" 2>/dev/null; }
if ! has torch || ! has numpy || ! has psutil; then
  venv=$repo/bench/.gpu-check-venv
  echo "gpu_check.sh: installing what $python lacks (torch, numpy, psutil) into $venv" >&2
  # --system-site-packages: keep an image's own (CUDA) torch when only psutil is missing.
  [[ -x $venv/bin/python ]] || "$python" -m venv --system-site-packages "$venv"
  python=$venv/bin/python
  missing=()
  for package in torch numpy psutil; do
    has "$package" || missing+=("$package")
  done
  "$python" -m pip install --disable-pip-version-check "${missing[@]}"
fi

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 || true
elif [[ ${#smoke[@]} -eq 0 ]]; then
  echo "gpu_check.sh: no nvidia-smi: running on the CPU (gloo); the figures are not a GPU's" >&2
fi

cd "$repo"
exec "$python" bench/gpu_check.py check --out "$out" --state-mb "$state_mb" "${smoke[@]}"
