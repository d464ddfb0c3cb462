"""The trainer's guarantees with its checkpoints in object storage, on a real S3-compatible
server (tools/s3_server.py): killed at random moments while its uploads are slowed, it loses no
committed checkpoint; a corrupt newest object falls back to the previous one; the resumed run's
weights are bit for bit the uninterrupted run's; and a run killed mid-epoch resumes exactly on
another world size. The same small run as test_resume_world_size (16 steps an epoch, a
checkpoint every 4), so a kill lands between, and during, uploads."""

from __future__ import annotations

import random
import time
from pathlib import Path

import boto3
import pytest
import torch
from botocore.config import Config

from tests.trainer.conftest import (
    MID_EPOCH_EPOCHS,
    Background,
    inspect,
    inspect_cli,
    manifest_epochs,
    mid_epoch_args,
    run_trainer,
    wait_until,
)
from trainer.checkpoint import CheckpointStore
from trainer.checkpoint_schema import MODEL_STATE, OPTIMIZER_STATE
from trainer.metrics import read_metrics
from trainer.storage import open_storage

pytestmark = pytest.mark.slow

EPOCHS = MID_EPOCH_EPOCHS
# Each upload held back half a second once its bytes are out: a kill often lands mid-upload.
SLOW_UPLOADS = {"TRAINER_CHECKPOINT_WRITE_DELAY": "0.5"}
args = mid_epoch_args


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted 2-rank run, on the filesystem."""
    directory = tmp_path_factory.mktemp("reference") / "run"
    finished = run_trainer(args(str(directory)))
    assert finished.returncode == 0, finished.output
    return directory


def snapshot(root: str | Path) -> dict:
    with open_storage(root).local_file("snapshot.pt") as path:
        return torch.load(path, weights_only=True)


def test_random_kills_during_slow_uploads_lose_no_committed_checkpoint_and_resume_bitwise(
    s3_bucket: str, reference: Path, tmp_path: Path
) -> None:
    root = f"s3://{s3_bucket}/runs/killed"
    chance = random.Random(33)
    committed: list[tuple[int, int]] = []
    for attempt in range(2):
        job = Background(args(root), tmp_path / f"run-{attempt}.log", env=SLOW_UPLOADS)
        seen = len(committed)
        wait_until(lambda: len(manifest_epochs(root)) > seen, "a new checkpoint")  # noqa: B023
        committed = manifest_epochs(root)
        # Somewhere in the next upload or two (each about 0.5 s and a few steps apart).
        time.sleep(chance.uniform(0.1, 1.5))
        job.kill_all()
        job.wait()
        after = manifest_epochs(root)
        assert after[: len(committed)] == committed, "a committed checkpoint was lost"
        assert inspect(root)["epochs_completed"] < EPOCHS, "the run finished before the kill"
        committed = after

    # The newest committed object damaged: the resume sets it aside and uses the one before.
    store = CheckpointStore(root)
    newest, previous = store.manifest()[-1], store.manifest()[-2]
    damaged = bytearray(open_storage(root).read_bytes(newest.file))
    damaged[len(damaged) // 2] ^= 0xFF
    open_storage(root).write(newest.file, lambda sink: sink.write(bytes(damaged)))

    finished = run_trainer(args(root))
    assert finished.returncode == 0, finished.output
    assert newest.file in finished.output and "sha256" in finished.output
    assert open_storage(root).exists(f"rejected/{newest.file}")
    assert (
        f"({previous.epochs_completed} epochs completed" in finished.output
        or f"step {previous.step_in_epoch}" in finished.output
    )

    resumed, expected = snapshot(root), snapshot(reference)
    for name, tensor in expected[MODEL_STATE].items():
        assert torch.equal(resumed[MODEL_STATE][name], tensor), name
    assert torch.equal(
        resumed[OPTIMIZER_STATE]["state"][0]["momentum_buffer"],
        expected[OPTIMIZER_STATE]["state"][0]["momentum_buffer"],
    )
    assert inspect(root)["model_sha256"] == inspect(reference)["model_sha256"]
    assert [row["epoch"] for row in read_metrics(root)] == list(range(1, EPOCHS + 1))
    # What the kills left half-uploaded was aborted on resume: no upload is pending.
    assert not _pending_uploads(s3_bucket)


def test_a_run_killed_mid_epoch_resumes_exactly_on_one_rank(
    s3_bucket: str, reference: Path, tmp_path: Path
) -> None:
    root = f"s3://{s3_bucket}/runs/resized"
    job = Background(args(root), tmp_path / "first.log")
    wait_until(lambda: any(step > 0 for _, step in manifest_epochs(root)), "a mid-epoch checkpoint")
    job.kill_all()
    job.wait()
    killed_at = inspect(root)
    assert killed_at["world_size"] == 2 and killed_at["epochs_completed"] < EPOCHS

    finished = run_trainer(args(root), nproc=1)
    assert finished.returncode == 0, finished.output
    assert "(the checkpoint was written with world size 2)" in finished.output
    resumed, expected = snapshot(root), snapshot(reference)
    for name, tensor in expected[MODEL_STATE].items():
        assert torch.allclose(resumed[MODEL_STATE][name], tensor, atol=1e-5), name
    for row, want in zip(read_metrics(root), read_metrics(reference), strict=True):
        assert row["loss"] == pytest.approx(want["loss"], abs=1e-5), row["epoch"]
    # As a person asks it: `python -m trainer.checkpoint s3://...` describes the run in the bucket.
    described = inspect_cli(root)
    assert (described["world_size"], described["epochs_completed"]) == (1, EPOCHS)
    assert described["path"].startswith(f"{root}/checkpoint-")


def _pending_uploads(bucket: str) -> list[str]:
    client = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
    listed = client.list_multipart_uploads(Bucket=bucket)
    return [upload["Key"] for upload in listed.get("Uploads", [])]
