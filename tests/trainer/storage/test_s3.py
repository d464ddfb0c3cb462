"""The object-storage backend's roots (trainer/storage/s3.py), which need no server: what an
s3:// root names, and that the storage travels to the writer process without a client. Its
contract runs in test_contract.py; here, what only object storage has (multipart uploads, an
upload killed halfway, buckets, a refused key), on a real S3-compatible server."""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.conftest import REPO_ROOT
from tests.support import waiting
from trainer.cli import UsageError, parse_config
from trainer.storage import Sink, StorageError, open_storage, s3
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


# -- on a real S3-compatible server (tools/s3_server.py) ------------------------------------------

# S3's smallest part but the last: 5 MiB parts make a 12 MiB object three of them.
SMALL_PART = 5 << 20


def test_a_large_object_goes_up_in_parts_while_it_is_produced_and_appears_whole(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3, "PART_BYTES", SMALL_PART)
    run = open_storage(f"s3://{s3_bucket}/run")
    data = random.Random(1).randbytes(12 << 20)
    seen_while_producing: list[bool] = []

    def produce(sink: Sink) -> None:
        for start in range(0, len(data), 1 << 20):
            sink.write(data[start : start + (1 << 20)])
        seen_while_producing.append(run.exists("big.pt"))

    written = run.write("big.pt", produce)
    assert seen_while_producing == [False]
    assert (written.size, written.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert run.read_bytes("big.pt") == data
    head = _client().head_object(Bucket=s3_bucket, Key="run/big.pt")
    assert head["ETag"].strip('"').endswith("-3"), "not a three-part multipart upload"


def test_an_upload_killed_halfway_is_invisible_and_aborted_by_remove_partial_writes(
    s3_bucket: str, tmp_path: Path
) -> None:
    root = f"s3://{s3_bucket}/run"
    marker = tmp_path / "parts-out"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, root, str(marker)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        waiting.wait_until(marker.exists, "two parts uploaded", 60, interval=0.05)
    finally:
        writer.kill()
        writer.wait()
    run = open_storage(root)
    assert not run.exists("checkpoint.pt")
    assert _pending(s3_bucket) == ["run/checkpoint.pt"]
    open_storage(f"s3://{s3_bucket}/elsewhere").remove_partial_writes()
    assert _pending(s3_bucket) == ["run/checkpoint.pt"], "another root's upload was touched"
    run.remove_partial_writes()
    assert _pending(s3_bucket) == []


# Uploads two 5 MiB parts of an object it never finishes, says so, then waits to be killed.
KILLED_WRITER = """
import sys, time
from pathlib import Path
from trainer.storage import open_storage
from trainer.storage import s3
s3.PART_BYTES = 5 << 20
def produce(sink):
    sink.write(b"x" * (11 << 20))
    while len(sink._uploads) < 2 or not all(u.done() for u in sink._uploads):
        time.sleep(0.05)
    Path(sys.argv[2]).touch()
    time.sleep(600)
open_storage(sys.argv[1]).write("checkpoint.pt", produce)
"""


def test_a_missing_bucket_is_refused_by_name_unless_the_run_may_create_it(
    s3_bucket: str, tmp_path: Path
) -> None:
    root = f"s3://{s3_bucket}-absent/runs/a"
    storage = open_storage(root)
    assert storage.lacks_bucket() and not open_storage(f"s3://{s3_bucket}/x").lacks_bucket()
    assert storage.unusable() == (
        f"is in bucket {s3_bucket}-absent, which does not exist (create it first, or pass "
        "--create-bucket)"
    )
    with pytest.raises(UsageError) as refused:
        parse_config(["3", "1", "--checkpoint-dir", root])
    assert refused.value.field == "checkpoint_dir"
    assert str(refused.value) == f"argument --checkpoint-dir: {root!r} {storage.unusable()}"

    config = parse_config(["3", "1", "--checkpoint-dir", root, "--create-bucket"])
    assert config.create_bucket and storage.lacks_bucket()  # made by the run, not the parser
    storage.create_bucket()
    storage.create_bucket()  # a second rank, a restart: the bucket is already this key's
    assert not storage.lacks_bucket() and storage.unusable() is None


def test_create_bucket_on_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"argument --create-bucket: --checkpoint-dir .* is a "):
        parse_config(["3", "1", "--checkpoint-dir", str(tmp_path / "run"), "--create-bucket"])
    with pytest.raises(StorageError, match="is not in a bucket: --create-bucket is for"):
        open_storage(tmp_path / "run").create_bucket()


def test_a_refused_key_is_one_line_naming_the_root(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    s3.forget_clients()
    problem = open_storage(f"s3://{s3_bucket}/run").unusable()
    assert problem == (
        f"cannot be reached: s3://{s3_bucket}/run: 403: Forbidden ({s3._REFUSED_HINT})"
    )
    with pytest.raises(StorageError, match=f"s3://{s3_bucket}/run/manifest.json: "):
        open_storage(f"s3://{s3_bucket}/run").read_bytes("manifest.json")


def _client() -> Any:
    return boto3.client("s3", config=Config(s3={"addressing_style": "path"}))


def _pending(bucket: str) -> list[str]:
    listed = _client().list_multipart_uploads(Bucket=bucket)
    return sorted(upload["Key"] for upload in listed.get("Uploads", []))


def test_keep_deletes_the_old_checkpoints_objects_from_the_bucket(s3_bucket: str) -> None:
    from tests.trainer.conftest import fake_state
    from trainer.checkpoint import CheckpointStore

    store = CheckpointStore(f"s3://{s3_bucket}/run", keep=2)
    committed = [store.commit(fake_state(float(epochs), epochs), epochs, 0) for epochs in (1, 2, 3)]
    assert [entry.file for entry in store.manifest()] == [e.file for e in committed[1:]]
    keys = sorted(item["Key"] for item in _client().list_objects_v2(Bucket=s3_bucket)["Contents"])
    assert f"run/{committed[0].file}" not in keys
    assert {f"run/{e.file}" for e in committed[1:]} | {"run/manifest.json"} <= set(keys)
