"""CheckpointManager on its own (atomic commit, retention, verification, fallback) and the
same guarantees in real runs: a kill mid-write and a corrupted newest checkpoint."""

from __future__ import annotations

import json
import os
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
    REJECTED_DIR,
    SNAPSHOT_NAME,
    CheckpointError,
    CheckpointManager,
    find_resumable,
    model_sha256,
    read_manifest,
    set_aside_skipped,
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
    manager = CheckpointManager(tmp_path, 2, background_min_bytes=0)  # the writer process
    state = fake_state(1.0, 1)
    manager.prepare(state)
    wait_until(manager.writer_ready, "the writer process to start")
    manager.save(state, epochs_completed=1, step_in_epoch=0)
    assert manager.last_mode == "background"
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
    manager = CheckpointManager(tmp_path / "not-created", 2, background_min_bytes=0)
    manager.prepare(fake_state(1.0, 1))
    wait_until(manager.writer_ready, "the writer process to start")
    manager.save(fake_state(1.0, 1), epochs_completed=1, step_in_epoch=0)
    assert manager.last_mode == "background"
    with pytest.raises(CheckpointError, match="checkpoint write failed"):
        manager.close()


def test_a_failed_inline_write_is_raised_at_the_save(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "not-created", 2)
    with pytest.raises(CheckpointError, match="checkpoint write failed"):
        manager.save(fake_state(1.0, 1), epochs_completed=1, step_in_epoch=0)
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
    assert (reference_copy / REJECTED_DIR / newest.name).is_file()  # set aside, not deleted
    assert manifest_epochs(reference_copy) == [(100, 0), (200, 0), (TOTAL_EPOCHS, 0)]
    info = inspect(reference_copy)
    assert info["epochs_completed"] == TOTAL_EPOCHS
    assert info["model_sha256"] == inspect(reference_run)["model_sha256"]


def test_a_fallback_rewrites_the_manifest_so_retention_keeps_the_good_one(tmp_path: Path) -> None:
    save_all(tmp_path, [1, 2, 3], keep=3)
    newest = tmp_path / "checkpoint-e000003-s000000.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    found = find_resumable(tmp_path)
    assert found is not None and found.entry.epochs_completed == 2

    moved = set_aside_skipped(tmp_path, found)

    assert moved == [tmp_path / REJECTED_DIR / newest.name]  # kept for a post-mortem
    assert not newest.exists()
    assert [e.epochs_completed for e in read_manifest(tmp_path)] == [1, 2]
    assert torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)["EPOCHS_RUN"] == 2
    # Training goes on with keep=2: retention drops epoch 1, never the checkpoint resumed from.
    manager = CheckpointManager(tmp_path, 2)
    manager.save(fake_state(4.0, 4), epochs_completed=4, step_in_epoch=0)
    manager.close()
    assert [e.epochs_completed for e in read_manifest(tmp_path)] == [2, 4]
    assert (tmp_path / "checkpoint-e000002-s000000.pt").is_file()


def _io_counters() -> dict[str, int]:
    """This process's /proc/self/io: ``rchar`` counts read() calls (page cache included),
    ``read_bytes`` what was fetched from storage (read() and page faults of a mapping alike)."""
    rows = (line.split(":") for line in Path("/proc/self/io").read_text().splitlines())
    return {name: int(value) for name, value in rows}


def _evict_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_verifying_and_loading_a_checkpoint_reads_it_once(tmp_path: Path) -> None:
    state = fake_state(1.0, 1)
    state["MODEL_STATE"]["weight"] = torch.randn(2 << 20)  # 8 MB, dwarfs everything else read
    manager = CheckpointManager(tmp_path, 2)
    manager.save(state, epochs_completed=1, step_in_epoch=0)
    manager.close()
    entry = read_manifest(tmp_path)[0]
    _evict_from_page_cache(tmp_path / entry.file)

    before = _io_counters()
    found = find_resumable(tmp_path)
    after = _io_counters()
    from_storage = after["read_bytes"] - before["read_bytes"]
    through_read = after["rchar"] - before["rchar"]
    if from_storage == 0:
        pytest.skip("this filesystem keeps the file in memory (tmpfs?): storage reads unseen")

    assert found is not None
    assert torch.equal(found.state["MODEL_STATE"]["weight"], state["MODEL_STATE"]["weight"])
    # Fetched from storage once, and no second pass through read() from the page cache.
    assert entry.size <= from_storage < 1.5 * entry.size, f"{from_storage} bytes from storage"
    assert from_storage + through_read < 1.5 * entry.size, f"{through_read} more bytes read()"


def test_small_states_are_written_inline_without_a_writer_process(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, 2)
    manager.prepare(fake_state(0.0, 0))
    for epoch in (1, 2):
        manager.save(fake_state(float(epoch), epoch), epochs_completed=epoch, step_in_epoch=0)
        assert manager.last_mode == "inline"
        assert manager.last_committed is not None
        assert manager.last_committed.epochs_completed == epoch  # committed before save returned
    assert not manager.writer_started
    manager.close()


def test_a_slow_inline_write_moves_later_saves_to_the_writer(tmp_path: Path) -> None:
    # A budget of 0 s: the first inline write is "too slow" by measurement.
    manager = CheckpointManager(tmp_path, 2, inline_budget_s=0.0)
    manager.save(fake_state(1.0, 1), epochs_completed=1, step_in_epoch=0)
    assert manager.last_mode == "inline" and manager.writer_started
    wait_until(manager.writer_ready, "the writer process to start")
    manager.save(fake_state(2.0, 2), epochs_completed=2, step_in_epoch=0)
    assert manager.last_mode == "background"
    manager.close()
    assert torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)["EPOCHS_RUN"] == 2


def test_preparing_again_after_the_first_step_stages_the_lazy_optimizer_slots(
    tmp_path: Path,
) -> None:
    # Before the first step an optimizer has no momentum buffers; the trainer prepares again
    # after it, so the first save copies into buffers that already exist.
    manager = CheckpointManager(tmp_path, 2, background_min_bytes=0)
    state = fake_state(1.0, 1)
    state["OPTIMIZER_STATE"] = {"state": {}}
    manager.prepare(state)
    state["OPTIMIZER_STATE"] = {"state": {0: {"momentum_buffer": torch.ones(4, 3)}}}
    manager.prepare(state)
    staged = manager._staging
    assert staged is not None
    slot = staged["OPTIMIZER_STATE"]["state"][0]["momentum_buffer"]
    assert slot.is_shared() and torch.equal(slot, torch.ones(4, 3))
    wait_until(manager.writer_ready, "the writer process to start")
    manager.save(state, epochs_completed=1, step_in_epoch=0)
    assert manager.last_mode == "background"
    again = manager._staging["OPTIMIZER_STATE"]["state"][0]["momentum_buffer"]
    assert again.data_ptr() == slot.data_ptr()  # reused, not allocated by the save
    manager.close()
    saved = torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)
    assert torch.equal(saved["OPTIMIZER_STATE"]["state"][0]["momentum_buffer"], torch.ones(4, 3))
