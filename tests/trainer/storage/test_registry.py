"""A storage backend is one module: registering a third one (the tests' object store,
conftest.py, defined as its module would define it) is all the checkpoint store, the writer, the
resume decision and its preflight, the metrics, the plot's curve and the inspection need to keep
a run there; none of them names a backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import trainer.async_writer
import trainer.storage
from tests.trainer.storage.conftest import SCHEME, MemoryServer
from trainer.async_writer import CheckpointWriter
from trainer.checkpoint import (
    MANIFEST_NAME,
    REJECTED_DIR,
    SNAPSHOT_NAME,
    CheckpointStore,
    describe,
    load_at,
)
from trainer.checkpoint_schema import TrainingCheckpoint
from trainer.cli import TrainConfig, UsageError, parse_config
from trainer.distributed import DistContext
from trainer.metrics import MetricsLog, read_metrics, rewind
from trainer.plot import loss_curve
from trainer.resume import ResumeRefusedError, choose_resume_point, preflight
from trainer.storage import StorageError, open_storage, register_backend, schemes

RANK0 = DistContext(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"), backend="")
ROOT = f"{SCHEME}://bucket/runs/a"


def config_for(root: str, *more: str) -> TrainConfig:
    return parse_config(["4", "1", "--checkpoint-dir", root, "--dataset-size", "64", *more])


def state_of(config: TrainConfig, epochs: int) -> dict:
    """A committed checkpoint of ``config``'s run after ``epochs`` epochs (no training)."""
    return TrainingCheckpoint(
        model_state={"weight": torch.full((4, 3), float(epochs))},
        epochs_run=epochs,
        world_size=2,
        config_fingerprint=config.fingerprint(),
        config=config.semantic_config(),
        global_batch=64,
        epoch_position=0,
    ).to_state()


def test_the_package_backends_are_its_modules_and_an_unknown_scheme_is_one_line() -> None:
    assert "file" in schemes()
    with pytest.raises(StorageError) as refused:
        open_storage("nowhere://bucket/run")
    message = str(refused.value)
    assert message.startswith("'nowhere://bucket/run': no storage for nowhere://; allowed: a path")
    assert "file://" in message and "\n" not in message
    with pytest.raises(UsageError, match=r"argument --checkpoint-dir: .*no storage for nowhere://"):
        parse_config(["4", "1", "--checkpoint-dir", "nowhere://bucket/run"])
    with pytest.raises(ValueError, match="lowercase letters and digits"):
        register_backend("Not A Scheme", trainer.storage.open_storage)


def test_a_registered_backend_is_chosen_by_its_scheme(memory_backend: MemoryServer) -> None:
    assert SCHEME in schemes()
    assert open_storage(ROOT).location == ROOT
    assert parse_config(["4", "1", "--checkpoint-dir", ROOT]).checkpoint_dir == ROOT


def test_fsdp_on_a_backend_without_directories_is_accepted(
    memory_backend: MemoryServer,
) -> None:
    """Sharded checkpoints go through the storage interface (uploaded from a spool directory,
    downloaded to be read), so no backend is refused them."""
    config = parse_config(["4", "1", "--checkpoint-dir", ROOT, "--parallelism", "fsdp"])
    assert (config.checkpoint_dir, config.parallelism) == (ROOT, "fsdp")


def test_commit_retention_fallback_and_set_aside_through_a_registered_backend(
    memory_backend: MemoryServer,
) -> None:
    config = config_for(ROOT, "--keep", "2")
    store = CheckpointStore(ROOT, keep=2)
    for epochs in (1, 2, 3):
        store.commit(state_of(config, epochs), epochs, 0)
    names = sorted(key.removeprefix("bucket/runs/a/") for key in memory_backend.objects)
    assert names == [
        "checkpoint-e000002-s000000.pt",
        "checkpoint-e000003-s000000.pt",
        MANIFEST_NAME,
        SNAPSHOT_NAME,
    ]
    newest = "bucket/runs/a/checkpoint-e000003-s000000.pt"
    damaged = bytearray(memory_backend.objects[newest])
    damaged[len(damaged) // 2] ^= 0xFF
    memory_backend.objects[newest] = bytes(damaged)

    point, state = choose_resume_point(RANK0, config)

    assert (point.location, point.epochs_completed) == (
        f"{ROOT}/checkpoint-e000002-s000000.pt",
        2,
    )
    assert state is not None and torch.equal(state.model_state["weight"], torch.full((4, 3), 2.0))
    assert f"bucket/runs/a/{REJECTED_DIR}/checkpoint-e000003-s000000.pt" in memory_backend.objects
    assert [entry.epochs_completed for entry in store.manifest()] == [2]
    assert describe(ROOT)["path"] == point.location
    # The ranks after rank 0 load the chosen checkpoint by its location.
    assert load_at(point.location).epochs_run == 2


def test_the_writer_commits_inline_and_from_its_thread_through_the_backend(
    memory_backend: MemoryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_for(ROOT)
    writer = CheckpointWriter(CheckpointStore(ROOT), background=False)
    writer.save(state_of(config, 1), epochs_completed=1, step_in_epoch=0)
    assert writer.last_mode == "inline" and writer.last_committed is not None
    writer.close()

    def no_shared_memory(_value: object) -> None:
        raise OSError("no /dev/shm")

    # A background commit: the thread that stands in for the writer process, past the caches.
    monkeypatch.setattr(trainer.async_writer, "move_to_shared_memory", no_shared_memory)
    writer = CheckpointWriter(CheckpointStore(ROOT), background_min_bytes=0)
    writer.prepare(state_of(config, 1))
    writer.save(state_of(config, 2), epochs_completed=2, step_in_epoch=0)
    assert writer.last_mode == "background"
    writer.close()
    assert [e.epochs_completed for e in CheckpointStore(ROOT).manifest()] == [1, 2]
    assert describe(ROOT)["epochs_completed"] == 2


def test_metrics_rewind_and_the_loss_curve_through_the_backend(
    memory_backend: MemoryServer,
) -> None:
    with pytest.raises(FileNotFoundError):
        read_metrics(ROOT)
    metrics = MetricsLog(ROOT, total_epochs=4, start_epoch=0)
    for epoch, loss in ((1, 4.0), (2, 2.0), (3, 1.0)):
        metrics.record(epoch, loss, 64, 0.5, None)
    assert [row["epoch"] for row in read_metrics(ROOT)] == [1, 2, 3]
    assert rewind(ROOT, 2) == 1  # the run resumes from epoch 2's checkpoint
    MetricsLog(ROOT, total_epochs=4, start_epoch=2).record(3, 0.5, 64, 0.5, None)
    assert loss_curve(ROOT) == ([1, 2, 3], [4.0, 2.0, 0.5])


def test_a_warm_start_and_the_preflight_read_another_backends_run(
    memory_backend: MemoryServer, tmp_path: Path
) -> None:
    source = config_for(ROOT)
    CheckpointStore(ROOT).commit(state_of(source, 4), 4, 0)
    # A new run on the filesystem, seeded from the object store's newest checkpoint.
    local = str(tmp_path / "new")
    warm = config_for(local, "--batch_size", "16", "--init-from", ROOT)
    point, state = choose_resume_point(RANK0, warm)
    assert point.location is None and point.origin is not None
    assert point.origin["path"] == f"{ROOT}/checkpoint-e000004-s000000.pt"
    assert state is not None and state.epochs_run == 4
    with pytest.raises(UsageError, match="is inside this run's --checkpoint-dir"):
        config_for(ROOT, "--init-from", f"{ROOT}/checkpoint-e000004-s000000.pt")
    # The local runner's preflight: another config is refused from the manifest alone.
    preflight(source, 2)
    with pytest.raises(ResumeRefusedError, match=r"'batch_size': 32.*'batch_size': 16"):
        preflight(config_for(ROOT, "--batch_size", "16"), 2)
