"""trainer/resume.py's refusals, from a committed checkpoint and no training: another global
batch is a new run, and more ranks than a global batch has samples is refused naming the sizes
that work; any other world size resumes. The exact resume itself, on 3 ranks and on 1, is
test_resume_world_size's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer.checkpoint import CheckpointStore
from trainer.checkpoint_schema import TrainingCheckpoint
from trainer.cli import parse_config
from trainer.distributed import DistContext
from trainer.resume import GLOBAL_BATCH, WORLD_SIZE, ResumeRefusedError, choose_resume_point


def _committed(directory: Path, *, batch_size: int, global_batch: int) -> None:
    """A committed mid-epoch checkpoint of a run with these settings (no training needed)."""
    config = parse_config(
        ["3", "1", "--checkpoint-dir", str(directory), "--batch_size", str(batch_size)]
    )
    state = TrainingCheckpoint(
        model_state={"weight": torch.zeros(1, 20)},
        epochs_run=1,
        world_size=2,
        config_fingerprint=config.fingerprint(),
        config=config.semantic_config(),
        global_batch=global_batch,
        epoch_position=2 * global_batch,
    ).to_state()
    directory.mkdir(parents=True)
    CheckpointStore(directory).commit(state, epochs=1, step=2)


def context(world_size: int) -> DistContext:
    return DistContext(0, world_size, 0, torch.device("cpu"), "gloo")


def test_another_global_batch_is_a_new_run_and_the_refusal_says_so(tmp_path: Path) -> None:
    _committed(tmp_path / "run", batch_size=16, global_batch=32)
    base = ["3", "1", "--checkpoint-dir", str(tmp_path / "run"), "--batch_size", "16"]
    point, _ = choose_resume_point(context(5), parse_config(base))  # any world size resumes
    assert (point.global_batch, point.step_in_epoch) == (32, 2)
    same = parse_config([*base, "--global-batch-size", "32"])
    assert choose_resume_point(context(1), same)[0].global_batch == 32
    with pytest.raises(ResumeRefusedError) as refused:
        choose_resume_point(context(2), parse_config([*base, "--global-batch-size", "64"]))
    assert refused.value.mismatch is not None and refused.value.mismatch.setting == GLOBAL_BATCH
    message = str(refused.value)
    assert "global batch of 32 samples per step" in message and "--global-batch-size 64" in message
    assert f"--init-from {tmp_path / 'run'} --checkpoint-dir NEW_DIR" in message


def test_more_ranks_than_samples_per_step_is_refused_naming_the_sizes_that_work(
    tmp_path: Path,
) -> None:
    _committed(tmp_path / "run", batch_size=2, global_batch=4)
    config = parse_config(
        ["3", "1", "--checkpoint-dir", str(tmp_path / "run"), "--batch_size", "2"]
    )
    assert choose_resume_point(context(4), config)[0].global_batch == 4
    with pytest.raises(ResumeRefusedError, match="resume it with 1 to 4 processes") as refused:
        choose_resume_point(context(5), config)
    assert refused.value.mismatch is not None and refused.value.mismatch.setting == WORLD_SIZE
    fresh = parse_config(
        ["3", "1", "--checkpoint-dir", str(tmp_path / "new"), "--global-batch-size", "2"]
    )
    with pytest.raises(ResumeRefusedError, match="run on 1 to 2 processes"):
        choose_resume_point(context(3), fresh)
