"""A storage backend of the tests' own: objects in this process's memory, behind the same
interface as the real ones, defined as a backend module would define it. It is what an object
store looks like to the trainer (no directories, no rename, no append; a reader gets a
downloaded copy), so the interface's contract tests run on it and on the filesystem, and
test_registry runs the trainer's storage users on it without their knowing."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainer.storage import (
    RunStorage,
    Sink,
    Written,
    open_storage,
    register_backend,
    unregister_backend,
)

SCHEME = "memory"


class MemoryServer:
    """The medium: every object of every root, as a server holds them. Writes in flight are
    kept apart until they complete, as a multipart upload is."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.in_flight: dict[str, bytearray] = {}
        self.lock = threading.Lock()


SERVER = MemoryServer()


class _UploadSink:
    def __init__(self, parts: bytearray) -> None:
        self._parts = parts
        self.digest = hashlib.sha256()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        self._parts += view
        self.digest.update(view)
        return len(view)

    def flush(self) -> None:
        """Parts go out whole, when the upload completes."""


def _absent(key: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "No such object", f"{SCHEME}://{key}")


@dataclass(frozen=True)
class MemoryStorage(RunStorage):
    """Root ``memory://PREFIX``: the objects whose keys start with ``PREFIX/``."""

    prefix: str

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    @property
    def location(self) -> str:
        return f"{SCHEME}://{self.prefix}"

    @property
    def identity(self) -> str:
        return self.location

    def unusable(self) -> str | None:
        return None

    def missing(self) -> str | None:
        with SERVER.lock:
            there = any(key.startswith(f"{self.prefix}/") for key in SERVER.objects)
        return None if there else "holds no object"

    def create(self) -> None:
        """An object store needs no folder made."""

    def parent(self) -> tuple[MemoryStorage, str]:
        head, _, name = self.prefix.rpartition("/")
        return MemoryStorage(head), name

    def exists(self, name: str) -> bool:
        with SERVER.lock:
            return self._key(name) in SERVER.objects

    def read_bytes(self, name: str) -> bytes:
        with SERVER.lock:
            data = SERVER.objects.get(self._key(name))
        if data is None:
            raise _absent(self._key(name))
        return data

    @contextlib.contextmanager
    def local_file(self, name: str) -> Iterator[Path]:
        data = self.read_bytes(name)
        with tempfile.NamedTemporaryFile(prefix="download-", suffix=".pt") as copy:
            copy.write(data)
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
        key = self._key(name)
        parts = bytearray()
        with SERVER.lock:
            SERVER.in_flight[key] = parts
        sink = _UploadSink(parts)
        try:
            produce(sink)
            if delay_s > 0:
                time.sleep(delay_s)
        except BaseException:
            with SERVER.lock:
                SERVER.in_flight.pop(key, None)  # an aborted upload
            raise
        with SERVER.lock:
            SERVER.objects[key] = bytes(SERVER.in_flight.pop(key))  # the upload's completion
        return Written(name, sink.digest.hexdigest(), len(parts))

    def append_line(self, name: str, line: str) -> None:
        try:
            old = self.read_bytes(name)
        except FileNotFoundError:
            old = b""
        self.write(name, lambda sink: sink.write(old + line.encode() + b"\n"))

    def copy(self, name: str, to: str) -> None:
        data = self.read_bytes(name)
        with SERVER.lock:
            SERVER.objects[self._key(to)] = data

    def move(self, name: str, to: str) -> bool:
        with SERVER.lock:
            data = SERVER.objects.pop(self._key(name), None)
            if data is None:
                return False
            SERVER.objects[self._key(to)] = data
        return True

    def delete(self, name: str) -> None:
        with SERVER.lock:
            SERVER.objects.pop(self._key(name), None)

    def remove_partial_writes(self) -> None:
        with SERVER.lock:
            for key in [key for key in SERVER.in_flight if key.startswith(f"{self.prefix}/")]:
                del SERVER.in_flight[key]


def open_root(root: str) -> MemoryStorage:
    return MemoryStorage(root.removeprefix(f"{SCHEME}://").rstrip("/"))


@pytest.fixture
def memory_backend() -> Iterator[MemoryServer]:
    """``memory://`` roots open with this module's backend for the test; its objects go after."""
    register_backend(SCHEME, open_root)
    try:
        yield SERVER
    finally:
        unregister_backend(SCHEME)
        with SERVER.lock:
            SERVER.objects.clear()
            SERVER.in_flight.clear()


@pytest.fixture(params=["file", SCHEME, "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> RunStorage:
    """A fresh run root on each backend: a directory of its own, a memory prefix, or a prefix
    in a bucket of a real S3-compatible server."""
    if request.param == "file":
        root = tmp_path / "run"
        open_storage(root).create()
        return open_storage(root)
    if request.param == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        return open_storage(f"s3://{bucket}/runs/run")
    request.getfixturevalue("memory_backend")
    return open_storage(f"{SCHEME}://{tmp_path.name}/run")
