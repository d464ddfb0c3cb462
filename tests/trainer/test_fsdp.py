"""--parallelism fsdp in real torchrun runs on the CPU (gloo), with the residual MLP whose blocks
are sharded one by one (``trainer.task:block_mlp_task``, Adam): the loss curve is DDP's, a
SIGKILLed run resumes bit for bit on the same world size, a sharded checkpoint resumes on 4 ranks
and back on 2 (under DDP: a sharded checkpoint into a whole model), and a DDP run's whole-file
checkpoint continues as an FSDP run, each exact to the DDP path's tolerance (1e-5). The store's
side of sharded checkpoints (fallback, retention, partial writes) is test_checkpoint's.

The runs are shared by the tests of this module (``runs``): each is a few seconds of two or four
processes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import (
    Background,
    inspect,
    inspect_cli,
    run_trainer,
    wait_until,
)
from tests.trainer.test_resume_world_size import losses_by_step, step_lines
from trainer.checkpoint import CheckpointStore, consolidate
from trainer.checkpoint_schema import MODEL_STATE
from trainer.metrics import read_metrics
from trainer.sharded import MODEL_KEY, whole_state

pytestmark = pytest.mark.slow

DATASET = 128
PER_RANK = 8  # on 2 ranks: a global batch of 16, 8 steps per epoch
STEPS = DATASET // (2 * PER_RANK)
EPOCHS = 2
TASK = "trainer.task:block_mlp_task"
TOLERANCE = 1e-5


def args(directory: Path, parallelism: str, epochs: int = EPOCHS) -> list[str]:
    return [
        str(epochs),
        "1",
        "--checkpoint-dir",
        str(directory),
        "--dataset-size",
        str(DATASET),
        "--batch_size",
        str(PER_RANK),
        "--save-every-steps",
        "3",
        "--keep",
        "20",
        "--task",
        TASK,
        "--parallelism",
        parallelism,
    ]


def newest_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The newest checkpoint's model weights, whole, whichever layout it has."""
    found = CheckpointStore(directory).find_resumable()
    assert found is not None
    if found.checkpoint.sharded_at is not None:
        return whole_state(found.checkpoint.sharded_at)[MODEL_KEY]
    return dict(found.checkpoint.model_state)


def kill_after(directory: Path, arguments: list[str], log: Path, nproc: int, commits: int) -> None:
    """Run in the background and SIGKILL every process once ``commits`` checkpoints are
    committed and the next one is being written. That one is held before its rename (the hold
    hook) until the kill, so the kill lands with a write in flight on any machine load."""
    hooks = {"TRAINER_CHECKPOINT_HOLD_AFTER": str(commits), "TRAINER_STEP_LOG": str(log)}
    job = Background(arguments, log.with_suffix(".out"), env=hooks, nproc=nproc)
    wait_until(lambda: "checkpoint commit held" in job.log.read_text(), "a commit held")
    assert any(directory.glob(".*.tmp-shards")), "the held commit's shards are not written"
    job.kill_all()
    job.wait()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DDP and an FSDP run from scratch, uninterrupted (the FSDP one an epoch longer), and an
    FSDP run SIGKILLed in its first epoch."""
    root = tmp_path_factory.mktemp("fsdp")
    for parallelism, epochs in (("ddp", EPOCHS), ("fsdp", EPOCHS + 1)):
        log = {"TRAINER_STEP_LOG": str(root / f"{parallelism}-log")}
        finished = run_trainer(args(root / parallelism, parallelism, epochs), env=log)
        assert finished.returncode == 0, finished.output
    kill_after(
        root / "killed",
        args(root / "killed", "fsdp", EPOCHS + 1),
        root / "killed-log",
        2,
        commits=1,  # after step 3 of epoch 0
    )
    return root


def test_fsdp_trains_the_same_steps_as_ddp(runs: Path) -> None:
    ddp = losses_by_step(step_lines(runs / "ddp-log"))
    fsdp = losses_by_step(step_lines(runs / "fsdp-log"))
    assert len(ddp) == EPOCHS * STEPS and set(ddp) <= set(fsdp)
    for key, loss in ddp.items():
        assert fsdp[key] == pytest.approx(loss, rel=TOLERANCE, abs=TOLERANCE), key
    for ddp_row, fsdp_row in zip(
        read_metrics(runs / "ddp"), read_metrics(runs / "fsdp")[:EPOCHS], strict=True
    ):
        assert fsdp_row["loss"] == pytest.approx(ddp_row["loss"], rel=TOLERANCE)
    # The FSDP run's checkpoint after EPOCHS epochs holds DDP's weights.
    at_end = runs / "fsdp" / f"checkpoint-e{EPOCHS:06d}-s000000.dcp"
    sharded = whole_state(at_end)[MODEL_KEY]
    ddp_weights = torch.load(runs / "ddp" / "snapshot.pt", weights_only=True)[MODEL_STATE]
    assert sharded.keys() == ddp_weights.keys()
    for name, tensor in ddp_weights.items():
        assert torch.allclose(sharded[name], tensor, atol=TOLERANCE), name


def test_a_killed_fsdp_run_resumes_bit_for_bit_on_the_same_world_size(
    runs: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "resumed"
    shutil.copytree(runs / "killed", directory)
    assert any(directory.glob(".*.tmp-shards")), "the kill should have left a write in flight"
    described = inspect_cli(directory)
    assert described["layout"] == "sharded" and described["world_size"] == 2
    epoch, step = described["epochs_completed"], described["step_in_epoch"]
    assert (epoch, 0 < step < STEPS) == (0, True), (epoch, step)

    log = tmp_path / "log"
    finished = run_trainer(args(directory, "fsdp", EPOCHS + 1), env={"TRAINER_STEP_LOG": str(log)})

    assert finished.returncode == 0, finished.output
    assert not list(directory.glob(".*.tmp-*")), "the partial write is still there"
    reference = losses_by_step(step_lines(runs / "fsdp-log"))
    resumed = losses_by_step(step_lines(log))
    assert min(resumed) == (epoch, step) and len(resumed) == (EPOCHS + 1) * STEPS - step
    assert {key: reference[key] for key in resumed} == resumed  # bit for bit
    expected = newest_weights(runs / "fsdp")
    final = newest_weights(directory)
    assert all(torch.equal(final[name], tensor) for name, tensor in expected.items())


def test_a_sharded_checkpoint_resumes_on_4_ranks_and_back_on_2_under_ddp(
    runs: Path, tmp_path: Path
) -> None:
    """2 -> 4: the killed 2-rank run goes on with 4 ranks, and is killed again in the next
    epoch; 4 -> 2: that 4-rank checkpoint goes on with 2 ranks under DDP (whole tensors from
    the shards) to the end. Every step's loss and the final weights are the uninterrupted
    run's."""
    directory = tmp_path / "run"
    shutil.copytree(runs / "killed", directory)
    start = inspect(directory)
    kill_after(
        directory,
        args(directory, "fsdp", EPOCHS + 1),
        tmp_path / "on-4-log",
        4,
        commits=3,  # steps 6 and 8 of epoch 0 and step 3 of epoch 1 on 4 ranks
    )
    on_4 = inspect(directory)
    assert (on_4["world_size"], on_4["layout"], on_4["global_batch"]) == (4, "sharded", 16)
    assert on_4["epochs_completed"] == 1 and 0 < on_4["step_in_epoch"] < STEPS

    log = tmp_path / "on-2-log"
    finished = run_trainer(args(directory, "ddp", EPOCHS + 1), env={"TRAINER_STEP_LOG": str(log)})
    assert finished.returncode == 0, finished.output
    assert "the checkpoint was written with world size 4" in finished.output

    reference = losses_by_step(step_lines(runs / "fsdp-log"))
    first = (start["epochs_completed"], start["step_in_epoch"])
    second = (on_4["epochs_completed"], on_4["step_in_epoch"])
    on_4_steps = {
        key: loss
        for key, loss in losses_by_step(step_lines(tmp_path / "on-4-log")).items()
        if first <= key < second
    }
    on_2_steps = losses_by_step(step_lines(log))
    assert min(on_2_steps) == second and len(on_4_steps) == STEPS - first[1] + second[1]
    for key, loss in {**on_4_steps, **on_2_steps}.items():
        assert loss == pytest.approx(reference[key], abs=TOLERANCE), key
    expected = newest_weights(runs / "fsdp")
    final = torch.load(directory / "snapshot.pt", weights_only=True)[MODEL_STATE]
    for name, tensor in expected.items():
        assert torch.allclose(final[name], tensor, atol=TOLERANCE), name


def test_a_ddp_runs_whole_file_checkpoint_goes_on_as_an_fsdp_run(
    runs: Path, tmp_path: Path
) -> None:
    """The finished DDP run extended by an epoch under FSDP: its weights and Adam state are
    sharded from the whole file, and the epoch trains as the FSDP run from scratch did."""
    directory = tmp_path / "run"
    shutil.copytree(runs / "ddp", directory)
    log = tmp_path / "log"
    finished = run_trainer(args(directory, "fsdp", EPOCHS + 1), env={"TRAINER_STEP_LOG": str(log)})
    assert finished.returncode == 0, finished.output

    reference = losses_by_step(step_lines(runs / "fsdp-log"))
    extended = losses_by_step(step_lines(log))
    assert sorted(extended) == [(EPOCHS, step) for step in range(STEPS)]
    for key, loss in extended.items():
        assert loss == pytest.approx(reference[key], abs=TOLERANCE), key
    consolidated = tmp_path / "whole.pt"
    assert consolidate(directory, consolidated)["layout"] == "sharded"
    weights = torch.load(consolidated, weights_only=True)[MODEL_STATE]
    for name, tensor in newest_weights(runs / "fsdp").items():
        assert torch.allclose(weights[name], tensor, atol=TOLERANCE), name
