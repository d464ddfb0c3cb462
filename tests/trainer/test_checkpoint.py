"""The checkpoint store on its own, without the writer (atomic commit, retention, verification,
fallback, legacy files) and the same guarantees in real runs: a kill mid-write and a corrupted
newest checkpoint. The writer's policy is test_async_writer."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from tests.trainer.conftest import (
    TOTAL_EPOCHS,
    Background,
    fake_sharded_commit,
    fake_state,
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
    CheckpointStore,
    checkpoint_name,
    describe,
    locate_checkpoint,
    model_sha256,
    sharded_staging_name,
    verify_all,
)
from trainer.checkpoint_schema import EPOCHS_RUN, LEGACY_DATA_STATE, MODEL_STATE


def save_all(directory: Path, epochs: list[int], keep: int = 2) -> CheckpointStore:
    store = CheckpointStore(directory, keep)
    for epoch in epochs:
        store.commit(fake_state(float(epoch), epoch), epoch, 0)
    return store


def test_keeps_the_last_k_and_snapshot_is_the_newest(tmp_path: Path) -> None:
    save_all(tmp_path, [1, 2, 3, 4], keep=3)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [
        "checkpoint-e000002-s000000.pt",
        "checkpoint-e000003-s000000.pt",
        "checkpoint-e000004-s000000.pt",
    ]
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert [item["epochs_completed"] for item in manifest["checkpoints"]] == [2, 3, 4]
    assert torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)[EPOCHS_RUN] == 4
    assert not list(tmp_path.glob(".*tmp*")), "temporary files left behind"


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
    found = CheckpointStore(tmp_path).find_resumable()
    assert found is not None
    assert found.entry.epochs_completed == 1
    assert "truncated" in found.skipped[0] or "sha256" in found.skipped[0]


def test_no_usable_checkpoint_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    save_all(tmp_path, [1, 2])
    for path in tmp_path.glob("checkpoint-*"):
        path.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        CheckpointStore(tmp_path).find_resumable()


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
    found = CheckpointStore(tmp_path).find_resumable()
    assert found is not None and found.entry.epochs_completed == 2

    moved = CheckpointStore(tmp_path).set_aside(found)

    assert moved == [newest.name]
    assert (tmp_path / REJECTED_DIR / newest.name).is_file()  # kept for a post-mortem
    assert not newest.exists()
    assert [e.epochs_completed for e in CheckpointStore(tmp_path).manifest()] == [1, 2]
    assert torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)[EPOCHS_RUN] == 2
    # Training goes on with keep=2: retention drops epoch 1, never the checkpoint resumed from.
    CheckpointStore(tmp_path, 2).commit(fake_state(4.0, 4), 4, 0)
    assert [e.epochs_completed for e in CheckpointStore(tmp_path).manifest()] == [2, 4]
    assert (tmp_path / "checkpoint-e000002-s000000.pt").is_file()


def _io_counters() -> dict[str, int]:
    """This process's I/O: ``rchar`` counts read() calls (page cache included), ``read_bytes``
    what was fetched from storage (read() and page faults of a mapping alike)."""
    counters = psutil.Process().io_counters()
    return {"rchar": counters.read_chars, "read_bytes": counters.read_bytes}


def _evict_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_verifying_and_loading_a_checkpoint_reads_it_once(tmp_path: Path) -> None:
    state = fake_state(1.0, 1)
    state[MODEL_STATE]["weight"] = torch.randn(2 << 20)  # 8 MB, dwarfs everything else read
    CheckpointStore(tmp_path, 2).commit(state, 1, 0)
    entry = CheckpointStore(tmp_path).manifest()[0]
    _evict_from_page_cache(tmp_path / entry.file)

    before = _io_counters()
    found = CheckpointStore(tmp_path).find_resumable()
    after = _io_counters()
    from_storage = after["read_bytes"] - before["read_bytes"]
    through_read = after["rchar"] - before["rchar"]
    if from_storage == 0:
        pytest.skip("this filesystem keeps the file in memory (tmpfs?): storage reads unseen")

    assert found is not None
    assert torch.equal(found.checkpoint.model_state["weight"], state[MODEL_STATE]["weight"])
    # Fetched from storage once, and no second pass through read() from the page cache.
    assert entry.size <= from_storage < 1.5 * entry.size, f"{from_storage} bytes from storage"
    assert from_storage + through_read < 1.5 * entry.size, f"{through_read} more bytes read()"


def test_keep_below_two_is_refused_because_a_fallback_needs_a_previous_checkpoint(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="keep must be >= 2"):
        CheckpointStore(tmp_path, 1)


def test_a_checkpoint_written_before_data_state_was_dropped_still_resumes(tmp_path: Path) -> None:
    # Earlier trainers also wrote DATA_STATE (seed, epoch, step, steps per epoch); such a file
    # must keep loading, and what this trainer writes no longer carries the key.
    legacy = {**fake_state(3.0, 3), LEGACY_DATA_STATE: {"seed": 0, "epoch": 3}}
    CheckpointStore(tmp_path, 2).commit(legacy, 3, 0)
    found = CheckpointStore(tmp_path).find_resumable()
    assert found is not None and found.checkpoint.epochs_run == 3
    assert torch.equal(found.checkpoint.model_state["weight"], torch.full((4, 3), 3.0))
    assert describe(tmp_path)["epochs_completed"] == 3
    assert LEGACY_DATA_STATE not in fake_state(1.0, 1)


def test_a_state_missing_a_required_key_is_never_committed(tmp_path: Path) -> None:
    state = fake_state(1.0, 1)
    del state[EPOCHS_RUN]
    with pytest.raises(CheckpointError, match="lacks EPOCHS_RUN"):
        CheckpointStore(tmp_path, 2).commit(state, 1, 0)
    assert not list(tmp_path.iterdir()), "nothing may be written for an unloadable state"


def _odd_sized_state() -> dict:
    """Larger than two bounce buffers and not a whole number of blocks: every path of a direct
    write (full chunks, a padded tail cut back by truncation) runs."""
    state = fake_state(1.0, 1)
    state[MODEL_STATE]["weight"] = torch.randn(4_500_001)
    return state


def _direct_io_supported(directory: Path) -> bool:
    try:
        fd = os.open(directory / ".probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    (directory / ".probe").unlink()
    return True


def _bytes_read_from_storage(path: Path) -> int:
    before = _io_counters()["read_bytes"]
    path.read_bytes()
    return _io_counters()["read_bytes"] - before


def _data_offsets(path: Path) -> list[int]:
    """Where each tensor's bytes start in a ``torch.save`` zip."""
    offsets = []
    with zipfile.ZipFile(path) as archive, path.open("rb") as raw:
        for info in archive.infolist():
            if "/data/" in info.filename:
                raw.seek(info.header_offset)
                header = raw.read(30)
                name_length, extra_length = struct.unpack("<HH", header[26:30])
                offsets.append(info.header_offset + 30 + name_length + extra_length)
    return offsets


def test_a_direct_write_is_the_same_checkpoint_and_leaves_the_page_cache_alone(
    tmp_path: Path,
) -> None:
    state = _odd_sized_state()
    entry = CheckpointStore(tmp_path, 2).commit(state, 1, 0, direct_io=True)

    path = tmp_path / entry.file
    data = path.read_bytes()
    assert (entry.size, entry.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    found = CheckpointStore(tmp_path).find_resumable()
    assert found is not None
    assert torch.equal(found.checkpoint.model_state["weight"], state[MODEL_STATE]["weight"])
    # Tensor bytes start on a block boundary, so they can go to the device with no copy.
    assert all(offset % 4096 == 0 for offset in _data_offsets(path))

    if not _direct_io_supported(tmp_path):
        pytest.skip("this filesystem refuses O_DIRECT: the commit fell back to buffered writes")
    (tmp_path / "fresh").mkdir()
    store = CheckpointStore(tmp_path / "fresh", 2)
    written_through_cache = tmp_path / "fresh" / store.commit(state, 2, 0).file
    written_past_cache = tmp_path / "fresh" / store.commit(state, 3, 0, direct_io=True).file
    # Only the direct write left its pages out of memory: reading it back goes to storage (all
    # but the last block, which truncating the padding brought into the cache).
    assert _bytes_read_from_storage(written_through_cache) == 0
    assert _bytes_read_from_storage(written_past_cache) >= entry.size - 4096


def _refuse_direct_io_at_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """What tmpfs before Linux 6.6 and some FUSE volumes do."""
    real_open = os.open

    def open_without_direct_io(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_without_direct_io)


def _refuse_direct_io_at_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a volume that accepts the flag at open but not the transfer does."""
    real_write = os.write

    def write_without_direct_io(fd: int, data: Any) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write_without_direct_io)


@pytest.mark.parametrize("refuse", [_refuse_direct_io_at_open, _refuse_direct_io_at_write])
def test_a_volume_refusing_direct_io_still_gets_the_same_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refuse: Callable[[pytest.MonkeyPatch], None]
) -> None:
    state = _odd_sized_state()
    (tmp_path / "direct").mkdir()
    (tmp_path / "refused").mkdir()
    direct = CheckpointStore(tmp_path / "direct", 2).commit(state, 1, 0, direct_io=True)
    refuse(monkeypatch)
    entry = CheckpointStore(tmp_path / "refused", 2).commit(state, 1, 0, direct_io=True)
    monkeypatch.undo()

    assert (entry.sha256, entry.size) == (direct.sha256, direct.size)
    assert (tmp_path / "refused" / entry.file).read_bytes() == (
        tmp_path / "direct" / direct.file
    ).read_bytes()
    assert not list((tmp_path / "refused").glob(".*tmp*")), "temporary files left behind"


# -- sharded checkpoints (--parallelism fsdp): the store's side, with stand-in shard files ------


def test_a_sharded_checkpoint_lists_every_file_and_retention_removes_whole_directories(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    store.commit(fake_state(1.0, 1), 1, 0)  # a whole-file checkpoint before: its snapshot goes
    for epoch in (2, 3):
        entry = fake_sharded_commit(store, epoch)
    assert sorted(entry.files) == [".metadata", "__0_0.distcp", "__1_0.distcp", "trainer.pt"]
    assert entry.size == sum(path.stat().st_size for path in (tmp_path / entry.file).iterdir())
    assert [path.name for path in tmp_path.glob("checkpoint-*")] == [
        "checkpoint-e000002-s000000.dcp",
        "checkpoint-e000003-s000000.dcp",
    ]
    assert not (tmp_path / SNAPSHOT_NAME).exists(), "a stale snapshot would pose as the newest"
    assert not list(tmp_path.glob(".*")), "the staging directory is left behind"
    found = store.find_resumable()
    assert found is not None and found.entry == entry
    assert found.checkpoint.sharded_at == str(tmp_path / entry.file)
    assert found.checkpoint.epochs_run == 3 and found.checkpoint.format_version == 3


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove"])
def test_a_damaged_shard_falls_back_to_the_previous_checkpoint_and_is_set_aside(
    tmp_path: Path, damage: str
) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    fake_sharded_commit(store, 1)
    newest = fake_sharded_commit(store, 2)
    shard = tmp_path / newest.file / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    if damage == "flip":
        data[7] ^= 0xFF
        shard.write_bytes(data)
    elif damage == "truncate":
        shard.write_bytes(data[:10])
    else:
        shard.unlink()

    found = store.find_resumable()

    assert found is not None and found.entry.epochs_completed == 1
    assert "__1_0.distcp" in found.skipped[0]
    with pytest.raises(CheckpointError, match=r"__1_0\.distcp"):
        verify_all(tmp_path)
    assert store.set_aside(found) == [newest.file]
    assert (tmp_path / REJECTED_DIR / newest.file / "trainer.pt").is_file()
    assert [entry.epochs_completed for entry in store.manifest()] == [1]
    assert verify_all(tmp_path) == [f"{tmp_path / found.entry.file}: 4 file(s) verified"]


def test_what_a_killed_sharded_write_leaves_is_removed_and_never_read(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    fake_sharded_commit(store, 1)
    # A kill while the ranks wrote (the staging directory), and one between the rename and the
    # manifest (a directory under a checkpoint's name that no manifest lists).
    staging = tmp_path / sharded_staging_name(checkpoint_name(2, 0, sharded=True))
    staging.mkdir()
    (staging / "__0_0.distcp").write_bytes(b"half")
    unlisted = tmp_path / checkpoint_name(3, 0, sharded=True)
    shutil.copytree(tmp_path / checkpoint_name(1, 0, sharded=True), unlisted)

    store.remove_partial_writes()

    assert not staging.exists()
    found = store.find_resumable()
    assert found is not None and found.entry.epochs_completed == 1
    fake_sharded_commit(store, 3)  # the same name again: the unlisted directory is replaced
    assert [entry.epochs_completed for entry in store.manifest()] == [1, 3]
    assert (unlisted / "__0_0.distcp").read_bytes() == bytes([3, 0]) * 100


def test_a_sharded_checkpoints_directory_is_one_checkpoint_to_init_from(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    entry = fake_sharded_commit(store, 1)
    located = locate_checkpoint(tmp_path / entry.file)
    assert located is not None
    root, name = located
    assert (root.location, name) == (str(tmp_path), entry.file)
    state, sha256 = CheckpointStore(root).read_file(name)  # verified: the manifest lists it
    assert (state.epochs_run, state.sharded_at, sha256) == (1, str(tmp_path / name), entry.sha256)
    assert locate_checkpoint(tmp_path) == (store.storage, None)  # the run's root


def test_committing_a_listed_sharded_name_again_replaces_it_and_stays_listed(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    fake_sharded_commit(store, 1)
    first = fake_sharded_commit(store, 2, shards=2)
    again = fake_sharded_commit(store, 2, shards=3)
    assert [entry.file for entry in store.manifest()] == [
        checkpoint_name(1, 0, sharded=True),
        first.file,
    ]
    assert store.manifest()[-1] == again and again.sha256 != first.sha256
    store.verify(again)
