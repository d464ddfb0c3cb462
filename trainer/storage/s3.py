"""The object-storage backend: a run's root is ``s3://BUCKET/PREFIX`` on any S3-compatible
service (AWS S3, MinIO, Ceph RGW, SeaweedFS, GCS's XML API, CoreWeave, Lambda, ...), through
boto3, the AWS SDK, never hand-written signing.

Where and as whom comes from boto3's own environment, so a pod needs no flag for it:
``AWS_ENDPOINT_URL_S3`` (or ``AWS_ENDPOINT_URL``) for a service other than AWS,
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (from a Secret), ``AWS_DEFAULT_REGION``. With
an endpoint of its own a service is addressed path-style (``ENDPOINT/BUCKET/KEY``), which every
S3-compatible server serves, virtual-hosted names needing DNS of their own.

How the storage promises hold on an object store (see ``trainer.storage``):

* **A write is whole or absent.** An object appears only when its upload completes: a small
  one is a single PUT; a large one a multipart upload whose parts go out while the producer
  (``torch.save``) is still serialising, hashed on the way, and that is completed only after
  the last part (``delay_s`` pauses just before). A write that fails is aborted; one killed
  halfway leaves an incomplete multipart upload, invisible to readers, which
  :meth:`S3Storage.remove_partial_writes` aborts (so does a bucket lifecycle rule for
  incomplete uploads, if the bucket has one).
* **Reads after writes.** S3 and the servers above are strongly consistent per object: the
  manifest PUT that commits a checkpoint is seen by the next GET.
* **A local file for a reader.** :meth:`S3Storage.local_file` downloads the object (boto3's
  managed transfer: ranged GETs in parallel) into a temporary file, under ``TRAINER_SPOOL_DIR``
  when set; a mapping of it outlives the file's removal.
* **Copy, move, delete** are server-side: a copy (the snapshot) never crosses the network to
  this machine; a move (setting a corrupt checkpoint aside) is a copy then a delete.

Only the trainer's ranks import boto3, and only for an ``s3://`` root.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.storage import RunStorage, Sink, StorageError, Written, spool_directory

URL_PREFIX = "s3://"
ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
# A multipart upload's parts: S3 wants at least 5 MiB for every part but the last, and at most
# 10,000 parts, so 64 MiB parts carry objects up to 625 GiB. At most PARTS_IN_FLIGHT go out at
# once while the producer fills the next; their buffers are all the memory a write holds.
PART_BYTES = 64 << 20
PARTS_IN_FLIGHT = 4
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
# A HEAD's refusal has no body: only its status says why.
_REFUSED = {"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}
_REFUSED_HINT = (
    "the key in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is refused or may not use this bucket"
)


def open_root(root: str) -> S3Storage:
    bucket, _, prefix = root.removeprefix(URL_PREFIX).partition("/")
    if not bucket:
        raise StorageError(f"{root!r}: expected s3://BUCKET or s3://BUCKET/PREFIX")
    return S3Storage(bucket, prefix.strip("/"))


_CLIENTS: dict[int, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client() -> Any:
    """This process's client (a client is not shared across processes: the writer process
    receives the storage pickled, and opens its own)."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(os.getpid())
        if client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise StorageError(
                    "s3:// roots need boto3, which this Python lacks (pip install boto3)"
                ) from None

            config = Config(
                s3={"addressing_style": "path" if _custom_endpoint() else "auto"},
                retries={"mode": "standard", "max_attempts": 5},
            )
            # A session of its own: the default one keeps the first credentials it found.
            client = boto3.session.Session().client("s3", config=config)
            _CLIENTS[os.getpid()] = client
        return client


def forget_clients() -> None:
    """Drop the clients made so far: the next use reads the environment again (a test that
    points this process at another server)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


def _custom_endpoint() -> bool:
    """A service other than AWS's (a MinIO, a Ceph, this suite's S3Proxy)."""
    return any(os.environ.get(name) for name in ENDPOINT_ENVS)


def _is_not_found(error: Exception) -> bool:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) in _NOT_FOUND


@contextlib.contextmanager
def _as_os_errors(where: str) -> Iterator[None]:
    """boto3's errors as the OSErrors every storage raises: FileNotFoundError for an absent
    object or bucket, StorageError (one line naming the place) for the rest."""
    _client()  # boto3 is there (a StorageError otherwise)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as error:
        if _is_not_found(error):
            raise FileNotFoundError(errno.ENOENT, "No such object", where) from None
        detail = error.response.get("Error", {})
        code = str(detail.get("Code", "error"))
        hint = f" ({_REFUSED_HINT})" if code in _REFUSED else ""
        raise StorageError(f"{where}: {code}: {detail.get('Message', error)}{hint}") from None
    except BotoCoreError as error:
        raise StorageError(f"{where}: {error}") from None


class _MultipartSink:
    """What the producer writes into: bytes are hashed and counted on their way, gathered into
    parts, and each full part is uploaded from a thread while the producer goes on. The upload
    starts with the first full part; an object smaller than one part is a single PUT."""

    def __init__(self, client: Any, bucket: str, key: str) -> None:
        self._client, self._bucket, self._key = client, bucket, key
        self.digest = hashlib.sha256()
        self.size = 0
        self._part = bytearray()
        self._upload_id: str | None = None
        self._uploads: list[Future[dict[str, Any]]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._slots = threading.BoundedSemaphore(PARTS_IN_FLIGHT)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        self.digest.update(view)  # hashlib releases the GIL for large buffers
        self.size += total
        while view:
            take = min(len(view), PART_BYTES - len(self._part))
            self._part += view[:take]
            view = view[take:]
            if len(self._part) == PART_BYTES:
                self._send_part()
        return total

    def flush(self) -> None:
        """Parts go out when full; the rest when the write completes."""

    def _send_part(self) -> None:
        if self._upload_id is None:
            created = self._client.create_multipart_upload(Bucket=self._bucket, Key=self._key)
            self._upload_id = created["UploadId"]
            self._pool = ThreadPoolExecutor(PARTS_IN_FLIGHT, thread_name_prefix="s3-part")
        assert self._pool is not None
        self._slots.acquire()  # at most PARTS_IN_FLIGHT buffers held: the producer waits
        body, number = bytes(self._part), len(self._uploads) + 1
        self._part.clear()
        self._uploads.append(self._pool.submit(self._upload_part, body, number))

    def _upload_part(self, body: bytes, number: int) -> dict[str, Any]:
        try:
            sent = self._client.upload_part(
                Bucket=self._bucket,
                Key=self._key,
                UploadId=self._upload_id,
                PartNumber=number,
                Body=body,
            )
            return {"PartNumber": number, "ETag": sent["ETag"]}
        finally:
            self._slots.release()

    def complete(self, delay_s: float) -> None:
        """Make the object appear: the last part, then the completion (or the one PUT)."""
        if self._upload_id is None:
            if delay_s > 0:
                time.sleep(delay_s)
            self._client.put_object(Bucket=self._bucket, Key=self._key, Body=bytes(self._part))
            return
        if self._part:
            self._send_part()
        parts = [upload.result() for upload in self._uploads]
        if delay_s > 0:
            time.sleep(delay_s)
        self._client.complete_multipart_upload(
            Bucket=self._bucket,
            Key=self._key,
            UploadId=self._upload_id,
            MultipartUpload={"Parts": parts},
        )
        self._close_pool()

    def abort(self) -> None:
        if self._upload_id is not None:
            for upload in self._uploads:
                upload.cancel()
            self._close_pool()
            with contextlib.suppress(Exception):
                self._client.abort_multipart_upload(
                    Bucket=self._bucket, Key=self._key, UploadId=self._upload_id
                )

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


@dataclass(frozen=True)
class S3Storage(RunStorage):
    """Root ``s3://BUCKET/PREFIX``: the objects whose keys start with ``PREFIX/``."""

    bucket: str
    prefix: str = ""

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    @property
    def location(self) -> str:
        return f"{URL_PREFIX}{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def identity(self) -> str:
        return self.location

    def unusable(self) -> str | None:
        """The bucket must exist and answer this process's credentials (nothing is created)."""
        try:
            with _as_os_errors(self.location):
                _client().head_bucket(Bucket=self.bucket)
        except FileNotFoundError:
            return (
                f"is in bucket {self.bucket}, which does not exist (create it first, or pass "
                "--create-bucket)"
            )
        except OSError as error:
            return f"cannot be reached: {error}"
        return None

    def lacks_bucket(self) -> bool:
        try:
            with _as_os_errors(self.location):
                _client().head_bucket(Bucket=self.bucket)
        except FileNotFoundError:
            return True
        return False

    def create_bucket(self) -> None:
        """CreateBucket, told where outside AWS's first region; one this key already owns (a
        second rank, a restart) is success, one another account owns is an error."""
        from botocore.exceptions import ClientError

        client = _client()
        region = client.meta.region_name
        spelled: dict[str, Any] = {"Bucket": self.bucket}
        if region and region != "us-east-1" and not _custom_endpoint():
            spelled["CreateBucketConfiguration"] = {"LocationConstraint": region}
        with _as_os_errors(f"{URL_PREFIX}{self.bucket}"):
            try:
                client.create_bucket(**spelled)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                    raise

    def missing(self) -> str | None:
        try:
            with _as_os_errors(self.location):
                listed = _client().list_objects_v2(
                    Bucket=self.bucket, Prefix=self._key(""), MaxKeys=1
                )
        except FileNotFoundError:
            return f"does not exist (no bucket {self.bucket})"
        return None if listed.get("KeyCount", 0) else "holds no object"

    def create(self) -> None:
        """An object store has no folders to make; the bucket exists (see :meth:`unusable`)."""

    def parent(self) -> tuple[S3Storage, str]:
        head, _, name = self.prefix.rpartition("/")
        return S3Storage(self.bucket, head), name

    def exists(self, name: str) -> bool:
        try:
            with _as_os_errors(self.location_of(name)):
                _client().head_object(Bucket=self.bucket, Key=self._key(name))
        except FileNotFoundError:
            return False
        return True

    def read_bytes(self, name: str) -> bytes:
        with _as_os_errors(self.location_of(name)):
            got = _client().get_object(Bucket=self.bucket, Key=self._key(name))
            data: bytes = got["Body"].read()
            return data

    @contextlib.contextmanager
    def local_file(self, name: str) -> Iterator[Path]:
        with tempfile.NamedTemporaryFile(prefix=".download-", dir=spool_directory()) as copy:
            with _as_os_errors(self.location_of(name)):
                _client().download_fileobj(self.bucket, self._key(name), copy)
            copy.flush()
            yield Path(copy.name)

    def write(
        self,
        name: str,
        produce: Callable[[Sink], object],
        *,
        direct: bool = False,
        delay_s: float = 0.0,
    ) -> Written:
        """``direct`` changes nothing here: the bytes go to the network, not the page cache."""
        where = self.location_of(name)
        with _as_os_errors(where):
            sink = _MultipartSink(_client(), self.bucket, self._key(name))
            try:
                produce(sink)
                sink.complete(delay_s)
            except BaseException:
                sink.abort()
                raise
        return Written(name, sink.digest.hexdigest(), sink.size)

    def append_line(self, name: str, line: str) -> None:
        """Objects cannot grow: the text is rewritten whole (metrics are small, one writer)."""
        try:
            old = self.read_bytes(name)
        except FileNotFoundError:
            old = b""
        data = old + line.encode() + b"\n"
        self.write(name, lambda sink: sink.write(data))

    def copy(self, name: str, to: str) -> None:
        with _as_os_errors(self.location_of(name)):
            source = {"Bucket": self.bucket, "Key": self._key(name)}
            _client().copy(source, self.bucket, self._key(to))  # multipart beyond 5 GB

    def move(self, name: str, to: str) -> bool:
        try:
            self.copy(name, to)
        except FileNotFoundError:
            return False
        self.delete(name)
        return True

    def delete(self, name: str) -> None:
        with _as_os_errors(self.location_of(name)):
            _client().delete_object(Bucket=self.bucket, Key=self._key(name))

    def remove_partial_writes(self) -> None:
        with _as_os_errors(self.location):
            client = _client()
            pages = client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=self._key("")
            )
            for page in pages:
                for upload in page.get("Uploads", []):
                    with contextlib.suppress(Exception):
                        client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
