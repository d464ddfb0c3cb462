"""Exact resume on another world size: a 2-rank run SIGKILLed mid-epoch, resumed with 3 ranks
and with 1 rank, trains every remaining sample of the epoch exactly once (counted from what
each rank put through the model, the TRAINER_STEP_LOG hook) with the same global batch, and its
per-step losses equal an uninterrupted 2-rank run's within 1e-5. The refusals (another global
batch, more ranks than a global batch has samples) are test_resume.py's."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import (
    MID_EPOCH_DATASET,
    MID_EPOCH_EPOCHS,
    MID_EPOCH_PER_RANK,
    Background,
    inspect,
    manifest_epochs,
    mid_epoch_args,
    run_trainer,
    wait_until,
)
from trainer.checkpoint_schema import MODEL_STATE
from trainer.metrics import read_metrics

DATASET = MID_EPOCH_DATASET
PER_RANK = MID_EPOCH_PER_RANK
STEPS = DATASET // (2 * PER_RANK)
EPOCHS = MID_EPOCH_EPOCHS
args = mid_epoch_args


StepKey = tuple[int, int]


def step_lines(log_dir: Path) -> list[dict]:
    """Every rank's lines; a line cut short by SIGKILL is not a step that was logged."""
    lines = []
    for path in log_dir.glob("steps-*.jsonl"):
        for text in path.read_text().splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                continue
    return lines


def losses_by_step(lines: list[dict]) -> dict[StepKey, float]:
    """A step's loss over all its ranks: the mean over the global batch's samples."""
    sums: dict[StepKey, float] = defaultdict(float)
    counts: dict[StepKey, int] = defaultdict(int)
    for line in lines:
        key = (line["epoch"], line["step"])
        sums[key] += line["loss_sum"]
        counts[key] += len(line["samples"])
    return {key: sums[key] / counts[key] for key in sums}


def killed_and_reference_runs(root: Path) -> dict[str, Path]:
    """The uninterrupted 2-rank run, and a 2-rank run killed mid-epoch (its directory and step
    log as the kill left them)."""
    reference = root / "reference"
    finished = run_trainer(args(reference), env={"TRAINER_STEP_LOG": str(root / "reference-log")})
    assert finished.returncode == 0, finished.output
    # --save-every-steps 4 counts optimizer steps from the start: mid-epoch, and at epoch ends.
    schedule = [(e, s) for e in range(EPOCHS) for s in (4, 8, 12, 16)]
    assert manifest_epochs(reference) == [(e + s // STEPS, s % STEPS) for e, s in schedule]

    killed = root / "killed"
    # Every commit takes >= 1 s (the write-delay hook), so the kill lands mid-epoch.
    hooks = {"TRAINER_CHECKPOINT_WRITE_DELAY": "1", "TRAINER_STEP_LOG": str(root / "killed-log")}
    job = Background(args(killed), root / "killed.log", env=hooks)
    wait_until(
        lambda: any(e == 1 and s >= 4 for e, s in manifest_epochs(killed)), "epoch 1, 4 steps"
    )
    job.kill_all()
    job.wait()
    return {"root": root, "reference": reference, "killed": killed}


@pytest.mark.slow
def test_a_run_killed_mid_epoch_resumes_exactly_with_3_ranks_and_with_1(tmp_path: Path) -> None:
    # One test for both, so the two runs they resume from are trained once.
    runs = killed_and_reference_runs(tmp_path)
    for world_size in (3, 1):
        resume_and_compare(runs, world_size)


def resume_and_compare(runs: dict[str, Path], world_size: int) -> None:
    root = runs["root"]
    directory = root / f"on-{world_size}"
    shutil.copytree(runs["killed"], directory)
    resumed_from = inspect(directory)
    epoch, step = resumed_from["epochs_completed"], resumed_from["step_in_epoch"]
    assert 0 < step < STEPS, f"the kill was not mid-epoch: {(epoch, step)}"
    assert resumed_from["world_size"] == 2 and resumed_from["global_batch"] == 32

    log = root / f"on-{world_size}-log"
    finished = run_trainer(args(directory), nproc=world_size, env={"TRAINER_STEP_LOG": str(log)})
    assert finished.returncode == 0, finished.output
    assert (
        f"world size {world_size} on 1 node(s) (the checkpoint was written with world size 2): "
        "each step trains the global batch of 32 samples"
    ) in finished.output

    before = [
        line
        for line in step_lines(root / "killed-log")
        if (line["epoch"], line["step"]) < (epoch, step)
    ]
    after = step_lines(log)
    assert {line["world_size"] for line in after} == {world_size}
    assert min((line["epoch"], line["step"]) for line in after) == (epoch, step)
    # The interrupted epoch: each sample exactly once, counted over both runs.
    used = Counter(
        index for line in before + after if line["epoch"] == epoch for index in line["samples"]
    )
    assert used == Counter(range(DATASET)), "a sample was skipped or trained twice"
    for later in range(epoch + 1, EPOCHS):
        used = Counter(
            index for line in after if line["epoch"] == later for index in line["samples"]
        )
        assert used == Counter(range(DATASET))
    # Each step trains the global batch: 32 samples over all ranks.
    per_step = Counter()
    for line in after:
        per_step[(line["epoch"], line["step"])] += len(line["samples"])
    assert set(per_step.values()) == {32}

    reference = losses_by_step(step_lines(root / "reference-log"))
    resumed = losses_by_step(after)
    assert len(resumed) == (EPOCHS - epoch) * STEPS - step
    for key, loss in resumed.items():
        assert loss == pytest.approx(reference[key], abs=1e-5), key
    for row, expected in zip(
        read_metrics(directory)[epoch:], read_metrics(runs["reference"])[epoch:], strict=True
    ):
        assert row["samples"] == DATASET
        assert row["loss"] == pytest.approx(expected["loss"], abs=1e-5), row["epoch"]
    final = torch.load(directory / "snapshot.pt", weights_only=True)[MODEL_STATE]
    expected = torch.load(runs["reference"] / "snapshot.pt", weights_only=True)[MODEL_STATE]
    for name, tensor in expected.items():
        assert torch.allclose(final[name], tensor, atol=1e-5), name
    info = inspect(directory)
    assert (info["epochs_completed"], info["world_size"], info["global_batch"]) == (
        EPOCHS,
        world_size,
        32,
    )
