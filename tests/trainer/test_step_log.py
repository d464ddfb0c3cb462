"""trainer/step_log.py: with TRAINER_STEP_LOG set, one JSON line per step and per process,
naming the samples each rank trained and its weighted loss sum; unset, no log at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from trainer.data import MicroBatch
from trainer.step_log import STEP_LOG_ENV, StepLog


def piece(indices: list[int]) -> MicroBatch:
    size = len(indices)
    return MicroBatch(
        indices=torch.tensor(indices, dtype=torch.long),
        inputs=torch.zeros(size, 2),
        targets=torch.zeros(size, 1),
        size=size,
        scale=1.0,
    )


def test_unset_there_is_no_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STEP_LOG_ENV, raising=False)
    assert StepLog.from_environment(rank=0, world_size=2) is None


def test_each_step_is_one_line_of_samples_and_weighted_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "steps"  # created on demand
    monkeypatch.setenv(STEP_LOG_ENV, str(directory))
    log = StepLog.from_environment(rank=1, world_size=3)
    assert log is not None
    # Two micro-batches and a rank's empty stand-in (size 0): its samples are none.
    log.record(
        0,
        5,
        [piece([4, 9]), piece([2]), piece([])],
        [torch.tensor(0.5), torch.tensor(2.0), torch.tensor(7.0)],
    )
    log.record(1, 0, [piece([3])], [torch.tensor(1.25)])
    log.close()
    [path] = directory.iterdir()
    assert path.name == f"steps-{os.getpid()}.jsonl"
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    assert lines == [
        {"epoch": 0, "step": 5, "world_size": 3, "rank": 1, "samples": [4, 9, 2], "loss_sum": 3.0},
        {"epoch": 1, "step": 0, "world_size": 3, "rank": 1, "samples": [3], "loss_sum": 1.25},
    ]


def test_a_restarted_process_appends_and_never_rewrites(tmp_path: Path) -> None:
    for step in (0, 1):
        log = StepLog(tmp_path, rank=0, world_size=1)
        log.record(0, step, [piece([step])], [torch.tensor(1.0)])
        log.close()
    [path] = tmp_path.iterdir()
    assert [json.loads(text)["step"] for text in path.read_text().splitlines()] == [0, 1]
