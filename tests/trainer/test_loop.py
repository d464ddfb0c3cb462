"""Real 2-rank CPU runs of ``torchrun -m trainer``: learning, save schedule, resume after
SIGKILL and SIGTERM, refusal of a mismatched resume, and an already-complete run."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from machine.ports import free_port
from tests.support.tensorboard import curves
from tests.trainer.conftest import (
    LAUNCH,
    SAVE_EVERY,
    TOTAL_EPOCHS,
    Background,
    inspect,
    manifest_epochs,
    reference_args,
    run_trainer,
    wait_until,
)
from trainer.checkpoint import CheckpointError
from trainer.checkpoint_schema import EPOCHS_RUN, MODEL_STATE, OPTIMIZER_STATE
from trainer.cli import EXIT_PEER_LOST, UsageError, parse_config
from trainer.distributed import DistContext
from trainer.metrics import read_metrics
from trainer.plot import loss_curve
from trainer.resume import ResumeRefusedError, choose_resume_point

RANK0 = DistContext(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"), backend="")

# Each commit takes >= 2 s (the trainer's documented write-delay hook; it changes no result), so
# after checkpoint 100 appears the run needs >= 4 s more to finish: the signal always lands
# mid-run, however loaded the machine is.
SLOW_COMMITS = {"TRAINER_CHECKPOINT_WRITE_DELAY": "2"}


def _last_logged_epoch(directory: Path) -> int:
    try:
        return max((int(row["epoch"]) for row in read_metrics(directory)), default=0)
    except OSError:
        return 0


def test_the_model_learns(reference_run: Path) -> None:
    rows = [json.loads(line) for line in (reference_run / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == list(range(1, TOTAL_EPOCHS + 1))
    first, last = rows[0]["loss"], rows[-1]["loss"]
    assert last < first / 100, f"loss went from {first} to {last}"
    assert all(row["samples"] == 256 and row["samples_per_s"] > 0 for row in rows)


def test_save_schedule_counts_completed_epochs_and_always_saves_the_last(
    reference_run: Path,
) -> None:
    # 250 epochs, save every 100: after 100 and 200 completed epochs, plus the final 250.
    assert manifest_epochs(reference_run) == [(100, 0), (200, 0), (250, 0)]
    for epochs in (100, 200, 250):
        path = reference_run / f"checkpoint-e{epochs:06d}-s000000.pt"
        assert torch.load(path, weights_only=True)[EPOCHS_RUN] == epochs
    # What the tutorial's step 8 reads: the latest checkpoint, with the tutorial's keys.
    snapshot = torch.load(reference_run / "snapshot.pt", weights_only=True)
    assert snapshot[EPOCHS_RUN] == TOTAL_EPOCHS
    assert set(snapshot[MODEL_STATE]) == {"weight", "bias"}
    info = inspect(reference_run)
    assert info["epochs_completed"] == TOTAL_EPOCHS
    assert info["world_size"] == 2
    assert info["path"] == str(reference_run / "checkpoint-e000250-s000000.pt")


def test_a_completed_run_exits_zero_without_training(reference_copy: Path) -> None:
    before = (reference_copy / "manifest.json").read_text()
    finished = run_trainer(reference_args(reference_copy))
    assert finished.returncode == 0, finished.output
    assert "run already complete: 250 of 250 epochs done" in finished.output
    assert (reference_copy / "manifest.json").read_text() == before


def test_sigkill_after_a_checkpoint_then_rerun_matches_the_uninterrupted_run(
    reference_run: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "ckpt"
    # Reports every second, so TensorBoard has steps past the checkpoint when the kill comes.
    env = {**SLOW_COMMITS, "TRAINER_REPORT_EVERY_S": "1"}
    job = Background(reference_args(directory), tmp_path / "first.log", env=env)
    wait_until(lambda: (SAVE_EVERY, 0) in manifest_epochs(directory), "the first checkpoint")
    # Kill once an epoch past the checkpoint is in the history, so the resume has rows to drop.
    wait_until(lambda: _last_logged_epoch(directory) > SAVE_EVERY, "an epoch after it")
    job.kill_all()
    job.wait()
    killed_at = inspect(directory)["epochs_completed"]
    assert killed_at < TOTAL_EPOCHS, "the run finished before the kill; the test proved nothing"

    trained_past_the_checkpoint = [r["epoch"] for r in read_metrics(directory)]
    assert max(trained_past_the_checkpoint) > killed_at, "nothing to rewind; proved nothing"
    steps_per_epoch = len(curves(reference_run / "tensorboard")["loss/step"]) // TOTAL_EPOCHS
    written = [step for step, _ in curves(directory / "tensorboard")["loss/step"]]
    assert max(written) > killed_at * steps_per_epoch, "no step past the checkpoint: proved nothing"

    finished = run_trainer(reference_args(directory))
    assert finished.returncode == 0, finished.output
    assert f"({killed_at} epochs completed)" in finished.output
    assert inspect(directory)["model_sha256"] == inspect(reference_run)["model_sha256"]
    # Each epoch once in the history, and the plot's curve is that one sequence.
    assert [r["epoch"] for r in read_metrics(directory)] == list(range(1, TOTAL_EPOCHS + 1))
    assert loss_curve(directory)[0] == list(range(1, TOTAL_EPOCHS + 1))
    # TensorBoard's reader sees one curve: every step once, each loss the uninterrupted run's.
    resumed_curves = curves(directory / "tensorboard")
    reference_curves = curves(reference_run / "tensorboard")
    steps = list(range(1, TOTAL_EPOCHS * steps_per_epoch + 1))
    assert [step for step, _ in resumed_curves["loss/step"]] == steps
    assert resumed_curves["loss/step"] == reference_curves["loss/step"]
    assert resumed_curves["loss/epoch"] == reference_curves["loss/epoch"]
    resumed = torch.load(directory / "snapshot.pt", weights_only=True)
    reference = torch.load(reference_run / "snapshot.pt", weights_only=True)
    for name, tensor in reference[MODEL_STATE].items():
        assert torch.equal(resumed[MODEL_STATE][name], tensor), name
    assert torch.equal(
        resumed[OPTIMIZER_STATE]["state"][0]["momentum_buffer"],
        reference[OPTIMIZER_STATE]["state"][0]["momentum_buffer"],
    )


def test_sigterm_writes_a_checkpoint_and_exits_cleanly(reference_run: Path, tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    job = Background(reference_args(directory), tmp_path / "term.log", env=SLOW_COMMITS)
    wait_until(lambda: (SAVE_EVERY, 0) in manifest_epochs(directory), "the first checkpoint")
    job.process.send_signal(signal.SIGTERM)  # what the kubelet does to the container's PID 1
    finished = job.wait(timeout=60)
    assert finished.output.count("received SIGTERM: stopping after the current step") == 2
    # An orderly stop, but not a finished run: 128 + SIGTERM, so the operator restarts the pod,
    # as the container's code too (torchrun itself would exit 1, which reads as a crash). No
    # traceback, and no abort in a trainer's teardown after it said its code.
    assert "[rank 0] INFO exiting with code 143" in finished.output, finished.output
    assert "[rank 1] INFO exiting with code 143" in finished.output, finished.output
    assert finished.returncode == 143, finished.output
    assert "Traceback" not in finished.output
    assert "terminate called" not in finished.output
    stopped = manifest_epochs(directory)[-1]
    assert (SAVE_EVERY, 0) < stopped < (TOTAL_EPOCHS, 0), "no checkpoint written on SIGTERM"
    info = inspect(directory)
    assert (info["epochs_completed"], info["step_in_epoch"]) == stopped

    finished = run_trainer(reference_args(directory))  # the restarted pod, same command
    assert finished.returncode == 0, finished.output
    assert inspect(directory)["model_sha256"] == inspect(reference_run)["model_sha256"]


def test_a_signal_to_one_rank_stops_every_rank_and_none_reports_success(
    reference_run: Path, tmp_path: Path
) -> None:
    """One pod of a multi-pod job preempted: its peers must not exit 0, or the operator would
    mark the job Succeeded with training unfinished and never resume it."""
    directory = tmp_path / "ckpt"
    job = Background(reference_args(directory), tmp_path / "one.log", env=SLOW_COMMITS)
    wait_until(lambda: (SAVE_EVERY, 0) in manifest_epochs(directory), "the first checkpoint")
    os.kill(job.worker_of_rank(1), signal.SIGTERM)
    finished = job.wait(timeout=60)
    assert finished.output.count("received SIGTERM: stopping after the current step") == 1
    assert "[rank 0] INFO exiting with code 143" in finished.output, finished.output
    assert "[rank 1] INFO exiting with code 143" in finished.output, finished.output
    assert finished.returncode != 0, finished.output
    stopped = manifest_epochs(directory)[-1]
    assert (SAVE_EVERY, 0) < stopped < (TOTAL_EPOCHS, 0), "no checkpoint written on the stop"

    finished = run_trainer(reference_args(directory))  # both pods restarted by OnFailure
    assert finished.returncode == 0, finished.output
    assert inspect(directory)["model_sha256"] == inspect(reference_run)["model_sha256"]


def test_another_global_batch_is_refused_in_one_line_naming_both(reference_copy: Path) -> None:
    # Any world size resumes (tests/trainer/test_resume_world_size.py); the global batch not.
    before = (reference_copy / "manifest.json").read_text()
    args = [*reference_args(reference_copy, total=300), "--global-batch-size", "128"]
    finished = run_trainer(args, nproc=1, launcher=LAUNCH)
    assert finished.returncode == 2, finished.output  # permanent: a restart cannot fix it
    errors = [line for line in finished.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, finished.output
    assert "global batch of 64 samples per step" in errors[0]
    assert "--global-batch-size 128" in errors[0]
    assert "Traceback" not in finished.output
    assert (reference_copy / "manifest.json").read_text() == before


def test_a_different_config_is_one_line_from_rank_0(reference_copy: Path) -> None:
    before = (reference_copy / "manifest.json").read_text()
    args = [*reference_args(reference_copy), "--dataset-size", "512"]
    finished = run_trainer(args, launcher=LAUNCH)
    assert finished.returncode == 2, finished.output
    errors = [line for line in finished.output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, finished.output  # rank 0's; no torchrun report, no second rank
    assert "'dataset_size': 256" in errors[0] and "'dataset_size': 512" in errors[0]
    assert "Traceback" not in finished.output
    assert (reference_copy / "manifest.json").read_text() == before


def test_a_different_config_is_refused_naming_both(reference_run: Path) -> None:
    config = parse_config([*reference_args(reference_run), "--seed", "7"])
    with pytest.raises(ResumeRefusedError) as refused:
        choose_resume_point(RANK0, config)
    message = str(refused.value)
    assert "'seed': 0" in message and "'seed': 7" in message
    assert f"--init-from {reference_run} --checkpoint-dir NEW_DIR" in message  # the way out
    # Extending a finished run (more epochs) is the same config and is accepted.
    longer = parse_config(reference_args(reference_run, total=400))
    assert choose_resume_point(RANK0, longer)[0].epochs_completed == TOTAL_EPOCHS


def test_warm_start_from_a_finished_run_with_another_batch_size(
    reference_run: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "bigger-batches"
    args = ["20", "10", "--checkpoint-dir", str(directory), "--dataset-size", "256"]
    finished = run_trainer([*args, "--batch_size", "64", "--init-from", str(reference_run)])
    assert finished.returncode == 0, finished.output
    assert "warm start: new run in" in finished.output

    source, info = inspect(reference_run), inspect(directory)
    assert info["epochs_completed"] == 20  # a new run counts its own epochs
    assert info["config"]["batch_size"] == 64
    assert info["config_fingerprint"] != source["config_fingerprint"]
    assert info["origin"]["path"] == source["path"]
    assert info["origin"]["sha256"] == source["sha256"]
    assert info["origin"]["epochs_completed"] == TOTAL_EPOCHS
    assert info["origin"]["config"]["batch_size"] == 32
    # Its own history, which starts where the source's training had got to, not from scratch.
    rows, reference_rows = read_metrics(directory), read_metrics(reference_run)
    assert [r["epoch"] for r in rows] == list(range(1, 21))
    assert rows[0]["loss"] < reference_rows[0]["loss"] / 100
    # Restarted with the same command, it resumes its own checkpoints (and keeps the origin).
    finished = run_trainer(
        ["30", "10", *args[2:], "--batch_size", "64", "--init-from", str(reference_run)]
    )
    assert finished.returncode == 0, finished.output
    assert "resuming from" in finished.output
    assert inspect(directory)["origin"]["path"] == source["path"]


def test_warm_start_from_a_missing_source_is_a_flag_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(UsageError, match=f"argument --init-from: '{missing}' does not exist"):
        parse_config(
            ["10", "5", "--checkpoint-dir", str(tmp_path / "new"), "--init-from", str(missing)]
        )


def test_warm_start_from_a_corrupt_source_is_a_clear_error(
    reference_copy: Path, tmp_path: Path
) -> None:
    newest = reference_copy / f"checkpoint-e{TOTAL_EPOCHS:06d}-s000000.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    new_dir = tmp_path / "new"
    config = parse_config(["10", "5", "--checkpoint-dir", str(new_dir), "--init-from", str(newest)])
    with pytest.raises(CheckpointError, match=f"--init-from {newest}: .*truncated"):
        choose_resume_point(RANK0, config)
    # A directory falls back to its newest checkpoint that verifies.
    config = parse_config(
        ["10", "5", "--checkpoint-dir", str(new_dir), "--init-from", str(reference_copy)]
    )
    point, _ = choose_resume_point(RANK0, config)
    assert point.origin is not None and point.origin["epochs_completed"] == 200
    for path in reference_copy.glob("checkpoint-*.pt"):
        path.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        choose_resume_point(RANK0, config)


@pytest.mark.slow
def test_a_failing_rank_s_exception_reaches_the_launchers_line(tmp_path: Path) -> None:
    """An exception nobody expected (a bug, here in the task) keeps its traceback, from the
    rank itself, and the launcher's one line names the rank and the exception."""
    args = ["5", "5", "--checkpoint-dir", str(tmp_path), "--dataset-size", "64"]
    task = ["--task", "tests.trainer.tasks:failing_on_rank_1"]
    finished = run_trainer([*args, *task], launcher=LAUNCH)
    assert finished.returncode == 1, finished.output
    assert (
        "error: trainer rank 1 failed with exit code 1: RuntimeError: deliberate failure in the "
        "task on rank 1"
    ) in finished.output
    assert "RuntimeError: deliberate failure in the task on rank 1" in finished.output
    # Rank 0 may fail too (its peer vanished) before torchrun stops it: a line of its own then,
    # since torchrun's "first failure" goes by whole-second timestamps and would as often name
    # rank 0's symptom as rank 1's cause.


def test_a_rank_that_loses_its_peer_exits_with_the_code_that_restarts_its_pod(
    tmp_path: Path,
) -> None:
    """Two torchruns of one rank each, as two pods of a PyTorchJob run: when one is killed (a
    deleted pod, a lost node) the other's collective fails; under restartPolicy ExitCode its exit
    code must be one that recreates the pod (128 and up), not 1, which fails the whole job."""
    directory = tmp_path / "ckpt"
    port = free_port()
    nodes = [
        Background(
            reference_args(directory),
            tmp_path / f"node{rank}.log",
            env=SLOW_COMMITS,
            nproc=1,
            node=(rank, 2, port),
        )
        for rank in (0, 1)
    ]
    wait_until(lambda: (SAVE_EVERY, 0) in manifest_epochs(directory), "the first checkpoint")
    nodes[1].kill_all()
    killed = nodes[1].wait()
    survivor = nodes[0].wait()

    assert killed.returncode == -signal.SIGKILL
    assert survivor.returncode == EXIT_PEER_LOST >= 128, survivor.output
    assert "error: rank 0 lost a peer (" in survivor.output, survivor.output
    assert "Traceback" not in survivor.output, survivor.output
    assert inspect(directory)["epochs_completed"] >= SAVE_EVERY
