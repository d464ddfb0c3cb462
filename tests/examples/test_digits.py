"""examples/digits: the example of your own code, run as `make local STACK=digits` runs it (the
process backend, 2 ranks under torchrun, the env contract, the data claim's local stand-in): it
learns, it reads its data from the claim, and a worker killed mid-run is restarted and the script
resumes from its own checkpoint in $CHECKPOINT_DIR."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
import yaml

from machine import procs
from readers.progress_report import last_report, summary
from tests.conftest import REPO_ROOT, wait_for_runner

EXAMPLE = REPO_ROOT / "examples" / "digits"
JOB = "digits"  # job.name of the example stack
WORKER = f"{JOB}-worker-0"
MARKER = "DIGITS_EXAMPLE_TEST_MARKER"


def example_module(name: str) -> ModuleType:
    """One of the example's scripts as a module (examples/ is no package: it is copied away)."""
    spec = importlib.util.spec_from_file_location(f"digits_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_data_claims_file_holds_the_digits_scikit_learn_ships(tmp_path: Path) -> None:
    train, prepare = example_module("train"), example_module("prepare_data")
    bundled_images, bundled_labels, source = train.load_digits(tmp_path / "empty")
    assert source.startswith("scikit-learn's bundled copy")
    assert bundled_images.shape == (1797, 64) and set(bundled_labels) == set(range(10))
    written = prepare.write(tmp_path / "claim")
    assert written == tmp_path / "claim" / "digits.npz"
    images, labels, source = train.load_digits(tmp_path / "claim")
    assert source == str(written)
    assert np.array_equal(images, bundled_images) and np.array_equal(labels, bundled_labels)
    assert images.min() >= 0.0 and images.max() <= 1.0


def test_a_checkpoint_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    train = example_module("train")
    path = tmp_path / "run" / "checkpoint.pt"
    train.save(path, {"epoch": 3})
    train.save(path, {"epoch": 4})
    assert torch.load(path)["epoch"] == 4
    assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.pt"]


def stack_file(directory: Path, epochs: int) -> None:
    """The example's stack, on the CPU, with a run long enough to kill a worker in."""
    document = yaml.safe_load((REPO_ROOT / "Pulumi.digits.yaml").read_text())
    job = document["config"]["pytorch-distributed:job"]
    job.update(
        {
            "gpusPerNode": 0,
            "command": ["train.py", "--epochs", str(epochs), "--batch-size", "16"],
            "backoffLimit": 4,
        }
    )
    (directory / "Pulumi.digits.yaml").write_text(yaml.safe_dump(document))


def survivors(marker: str) -> list[int]:
    return [pid for pid in procs.tagged(MARKER, marker) if pid != os.getpid()]


@pytest.mark.slow
def test_two_ranks_learn_the_digits_and_a_killed_worker_resumes_from_checkpoint_dir(
    tmp_path: Path,
) -> None:
    epochs = 12
    stack_file(tmp_path, epochs)
    example_module("prepare_data").write(tmp_path / "data")
    claim = tmp_path / "claim"
    checkpoint = claim / JOB / "checkpoint.pt"
    marker = uuid.uuid4().hex
    runner = subprocess.Popen(
        [
            *(sys.executable, "-m", "tools.run_local", "--stack", JOB),
            *("--stack-dir", str(tmp_path), "--checkpoint-root", str(claim)),
            *("--volume", f"digits-data={tmp_path / 'data'}"),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", MARKER: marker},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_runner(checkpoint.is_file, "the first checkpoint", runner, timeout=180)
        epoch_at_kill = torch.load(checkpoint)["epoch"]
        pid_file = claim / ".run_local" / f"{WORKER}.pid"
        tree = [int(pid_file.read_text()), *procs.descendants(int(pid_file.read_text()))]
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, _ = runner.communicate(timeout=600)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert survivors(marker) == [], "processes outlived the run"

    assert runner.returncode == 0, out
    assert epoch_at_kill < epochs, f"training finished before the kill; nothing was tested\n{out}"
    assert f"data: 1797 digits from {tmp_path / 'data' / 'digits.npz'}" in out
    assert f"[run_local] {WORKER} exited with code 137; restarting it" in out
    resumed = re.findall(
        rf"resuming from {re.escape(str(checkpoint))} \(epoch (\d+) of {epochs}\)", out
    )
    assert resumed and int(resumed[0]) >= epoch_at_kill, out
    assert torch.load(checkpoint)["epoch"] == epochs
    accuracy = float(re.findall(r"test accuracy ([0-9.]+)", out)[-1])
    assert accuracy > 0.9, out
    assert "job digits: Succeeded" in out and "CHECKPOINT_DIR:   checkpoint.pt" in out
    # It reports its progress the documented way: what `make status` and `pulumi up` read.
    report = last_report(out.splitlines())
    assert report is not None and report.done and report.epoch == epochs, out
    assert report.checkpoint is not None and report.checkpoint.epoch == epochs
    assert summary(report).startswith(f"finished {epochs}/{epochs} epochs, "), summary(report)
