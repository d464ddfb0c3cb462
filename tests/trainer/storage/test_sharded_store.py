"""The store's side of sharded checkpoints on every backend (a directory, the tests' in-memory
object store, a real S3-compatible server), with stand-in shard files: committed with every
file's sha256, retired whole by retention, read back (downloaded, where the root is not a
directory here, and then only after every file is checked), and a corrupt shard set aside with
its checkpoint. The trainer's runs on S3 are
test_s3_fsdp's."""

from __future__ import annotations

import pytest

from tests.trainer.conftest import fake_sharded_commit
from trainer.checkpoint import CheckpointError, CheckpointStore, verify_all
from trainer.storage import RunStorage


def test_sharded_checkpoints_commit_read_back_and_retire_whole(storage: RunStorage) -> None:
    store = CheckpointStore(storage, keep=2)
    first, *kept = [fake_sharded_commit(store, epochs) for epochs in (1, 2, 3)]

    assert [entry.file for entry in store.manifest()] == [entry.file for entry in kept]
    assert set(kept[-1].files or ()) == {"__0_0.distcp", "__1_0.distcp", ".metadata", "trainer.pt"}
    assert not any(storage.exists(f"{first.file}/{file}") for file in first.files or ())
    assert len(verify_all(storage.location)) == 2
    found = store.find_resumable()
    assert found is not None and found.entry == kept[-1]
    assert found.checkpoint.sharded_at == storage.location_of(kept[-1].file)
    with store.local_shards(kept[-1].file) as directory:
        assert (directory / "__1_0.distcp").read_bytes() == bytes([3, 1]) * 100
        assert (directory / ".metadata").read_bytes() == b"index"


def test_a_corrupt_shard_is_never_read_and_falls_back_to_the_previous_checkpoint(
    storage: RunStorage,
) -> None:
    store = CheckpointStore(storage, keep=3)
    previous = fake_sharded_commit(store, 1)
    newest = fake_sharded_commit(store, 2)
    shard = f"{newest.file}/__1_0.distcp"
    storage.write(shard, lambda sink: sink.write(bytes([2, 9]) * 100))

    if storage.local_directory() is None:  # every rank checks what it downloads
        with pytest.raises(CheckpointError, match="sha256"), store.local_shards(newest.file):
            pass
    found = store.find_resumable()
    assert found is not None and found.entry == previous
    assert "__1_0.distcp fails its sha256 check" in found.skipped[0]
    assert store.set_aside(found) == [newest.file]
    assert [entry.file for entry in store.manifest()] == [previous.file]
    assert storage.exists(f"rejected/{shard}") and not storage.exists(shard)
