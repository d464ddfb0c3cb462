"""The object-storage backend's roots (trainer/storage/s3.py), which need no server: what an
s3:// root names, and that the storage travels to the writer process without a client. Its
contract and the trainer's guarantees on a real S3-compatible server are for the tests that
start one (issue 33, part 2)."""

from __future__ import annotations

import pickle

import pytest

from trainer.storage import StorageError, open_storage
from trainer.storage.s3 import S3Storage


def test_a_root_is_a_bucket_and_a_prefix() -> None:
    run = open_storage("s3://ckpt/runs/ddp-dev/")
    assert run == S3Storage("ckpt", "runs/ddp-dev")
    assert run.location == "s3://ckpt/runs/ddp-dev"
    assert run.location_of("manifest.json") == "s3://ckpt/runs/ddp-dev/manifest.json"
    assert run.parent() == (S3Storage("ckpt", "runs"), "ddp-dev")
    assert open_storage("s3://ckpt").location == "s3://ckpt"
    assert open_storage("s3://ckpt").encloses(run) and not run.encloses(open_storage("s3://ckpt"))
    with pytest.raises(StorageError, match="expected s3://BUCKET or s3://BUCKET/PREFIX"):
        open_storage("s3://")


def test_the_storage_reaches_the_writer_process_whole_and_without_a_client() -> None:
    run = open_storage("s3://ckpt/runs/a")
    assert pickle.loads(pickle.dumps(run)) == run
