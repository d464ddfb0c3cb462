"""bench/gpu_check.sh as a CPU smoke test: no GPU here, so its figures mean nothing, but every
phase runs for real (DDP runs, the stall, the kill and bitwise resume, the step-time comparison)
and writes its figures, so the script works the day a GPU machine runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.slow
def test_the_gpu_check_runs_every_phase_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [str(REPO_ROOT / "bench" / "gpu_check.sh"), "--smoke", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert figures["smoke"] is True and figures["processes"] == 2
    assert figures["device"]["backend"] == ("nccl" if figures["device"]["cuda"] else "gloo")
    for run in ("default", "large"):
        assert figures[run]["world_size"] == 2 and figures[run]["samples_per_s"] > 0, run
    assert figures["large"]["checkpoint_bytes"] > figures["large"]["state_mb"] << 20
    stall = figures["stall"]
    assert stall["ours"]["save_blocks_s"] > 0 and stall["synchronous"]["save_blocks_s"] > 0
    assert figures["resume"]["bitwise_equal"] is True
    assert figures["resume"]["killed_at"][1] > 0  # killed after a mid-epoch checkpoint
    steps = figures["steps"]
    assert steps["bare_us_per_step"] > 0 and steps["trainer_us_per_step"] > 0
    assert f"gpu_check: figures in {out}" in done.stdout


def test_a_bad_argument_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(REPO_ROOT / "bench" / "gpu_check.sh"), "--state-mb", "lots"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == "gpu_check.sh: error: --state-mb needs a number of megabytes >= 1\n"
    assert not list(tmp_path.iterdir())
