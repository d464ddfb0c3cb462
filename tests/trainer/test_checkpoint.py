"""CheckpointManager on its own (atomic commit, retention, verification, fallback) and the
same guarantees in real runs: a kill mid-write and a corrupted newest checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import (
    TOTAL_EPOCHS,
    Background,
    inspect,
    inspect_cli,
    manifest_epochs,
    reference_args,
    run_module,
    run_trainer,
    wait_until,
)
from trainer.checkpoint import (
    MANIFEST_NAME,
    SNAPSHOT_NAME,
    CheckpointError,
    CheckpointManager,
    find_resumable,
    model_sha256,
)


def fake_state(value: float, epochs: int) -> dict:
    return {
        "FORMAT_VERSION": 1,
        "MODEL_STATE": {"weight": torch.full((4, 3), value)},
        "EPOCHS_RUN": epochs,
        "WORLD_SIZE": 2,
        "CONFIG_FINGERPRINT": "abc",
    }


def save_all(directory: Path, epochs: list[int], keep: int = 2) -> CheckpointManager:
    manager = CheckpointManager(directory, keep)
    for epoch in epochs:
        manager.save(fake_state(float(epoch), epoch), epochs_completed=epoch, step_in_epoch=0)
    manager.close()
    return manager


def test_keeps_the_last_k_and_snapshot_is_the_newest(tmp_path: Path) -> None:
    save_all(tmp_path, [1, 2, 3, 4], keep=3)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [
        "checkpoint-e000002-s000000.pt",
        "checkpoint-e000003-s000000.pt",
        "checkpoint-e000004-s000000.pt",
    ]
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert [item["epochs_completed"] for item in manifest["checkpoints"]] == [2, 3, 4]
    assert torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)["EPOCHS_RUN"] == 4
    assert not list(tmp_path.glob(".*tmp*")), "temporary files left behind"


def test_the_snapshot_is_a_private_copy_taken_before_save_returns(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, 2)
    state = fake_state(1.0, 1)
    manager.save(state, epochs_completed=1, step_in_epoch=0)
    state["MODEL_STATE"]["weight"].fill_(99.0)  # training goes on while the writer works
    manager.close()
    saved = torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)
    assert torch.equal(saved["MODEL_STATE"]["weight"], torch.full((4, 3), 1.0))


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(
    tmp_path: Path, damage: str
) -> None:
    save_all(tmp_path, [1, 2])
    newest = tmp_path / "checkpoint-e000002-s000000.pt"
    data = bytearray(newest.read_bytes())
    if damage == "truncate":
        newest.write_bytes(data[: len(data) // 2])
    else:
        data[len(data) // 2] ^= 0xFF
        newest.write_bytes(data)
    found = find_resumable(tmp_path)
    assert found is not None
    assert found.entry.epochs_completed == 1
    assert "truncated" in found.skipped[0] or "sha256" in found.skipped[0]


def test_a_failed_background_write_is_raised_not_lost(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "not-created", 2)
    manager.save(fake_state(1.0, 1), epochs_completed=1, step_in_epoch=0)
    with pytest.raises(CheckpointError, match="checkpoint write failed"):
        manager.close()


def test_no_usable_checkpoint_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    save_all(tmp_path, [1, 2])
    for path in tmp_path.glob("checkpoint-*"):
        path.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        find_resumable(tmp_path)


def test_model_hash_tracks_every_bit() -> None:
    weights = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0])}
    same = {"b": torch.tensor([0.0]), "w": torch.tensor([1.0, 2.0])}
    assert model_sha256(weights) == model_sha256(same)
    flipped = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([-0.0])}  # differs in one bit
    assert model_sha256(weights) != model_sha256(flipped)


def test_inspection_of_a_missing_or_empty_directory_fails_clearly(tmp_path: Path) -> None:
    for directory, message in [
        (tmp_path / "missing", "does not exist"),
        (tmp_path, "no committed checkpoint"),
    ]:
        done = run_module("trainer.checkpoint", str(directory))
        assert done.returncode != 0
        assert message in done.stderr and str(directory) in done.stderr


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_one_usable(
    reference_run: Path, reference_copy: Path
) -> None:
    # Extend the finished 250-epoch run to 300. The documented write-delay hook holds the new
    # write between "bytes written" and "fsync + rename", so SIGKILL lands while it is in flight.
    longer = reference_args(reference_copy, total=300)
    job = Background(
        longer, reference_copy.parent / "slow.log", env={"TRAINER_CHECKPOINT_WRITE_DELAY": "60"}
    )
    in_flight = ".checkpoint-e000300-s000000.pt.tmp-*"
    wait_until(lambda: any(reference_copy.glob(in_flight)), "a write in flight")
    job.kill_all()
    job.wait()
    assert any(reference_copy.glob(in_flight)), "the kill should have left a partial file"
    assert manifest_epochs(reference_copy)[-1] == (TOTAL_EPOCHS, 0)
    info = inspect_cli(reference_copy)
    assert info["epochs_completed"] == TOTAL_EPOCHS and info["skipped"] == []
    assert info["model_sha256"] == inspect(reference_run)["model_sha256"]

    finished = run_trainer(longer)
    assert finished.returncode == 0, finished.output
    assert not list(reference_copy.glob(".*.tmp-*")), "the stale temporary file is still there"
    assert inspect(reference_copy)["epochs_completed"] == 300


def test_a_truncated_newest_checkpoint_falls_back_and_still_reaches_the_same_weights(
    reference_run: Path, reference_copy: Path
) -> None:
    newest = reference_copy / f"checkpoint-e{TOTAL_EPOCHS:06d}-s000000.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    assert inspect(reference_copy)["epochs_completed"] == 200

    finished = run_trainer(reference_args(reference_copy))
    assert finished.returncode == 0, finished.output
    assert "falling back to the previous one" in finished.output
    assert "resuming from" in finished.output and "OLDER checkpoint" in finished.output
    info = inspect(reference_copy)
    assert info["epochs_completed"] == TOTAL_EPOCHS
    assert info["model_sha256"] == inspect(reference_run)["model_sha256"]
