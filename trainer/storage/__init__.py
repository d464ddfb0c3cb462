"""A run's storage: the one interface through which every read and write of a run goes (its
checkpoints, the manifest naming them, its metrics), and the registry that picks a backend from
the run's root.

A root is what ``--checkpoint-dir`` says: a path or ``file://PATH`` (a directory, the
filesystem backend), or ``SCHEME://...`` for another backend. Every module of this package
other than this one is a backend, named by its scheme (``file.py`` for ``file://`` and plain
paths), exposing ``open_root(root) -> RunStorage``; so a new backend is one new module here (plus
the stack setting that chooses it). :func:`register_backend` adds one from outside the package
(a test's, a plugin's).

What a run keeps is a flat set of named objects (``manifest.json``, ``checkpoint-....pt``,
``metrics.jsonl``, ``snapshot.pt``, ``rejected/NAME``). A backend knows how bytes reach and
leave its medium and nothing of checkpoints: which objects exist, in which order they are
written and what commits them is the checkpoint store's (``trainer.checkpoint``), the same on
every backend. What every backend guarantees:

* :meth:`RunStorage.write` makes an object appear whole under its name or not at all, with its
  sha256 and size known without reading it back, and a write killed halfway leaves at most
  garbage that :meth:`RunStorage.remove_partial_writes` recognises by construction;
* an object read after a write returns (for the same writer) is the written one (S3 and its
  kin are strongly consistent per object; a directory is after fsync);
* :meth:`RunStorage.local_file` hands a reader the object as a file on this machine, mapped
  without a second copy where the medium allows (the filesystem: the file itself).

Only the standard library is imported here: the registry runs in tools that never load torch.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# The scheme of a root that names one: `s3://bucket/prefix` -> `s3`; a path has none.
_SCHEME = re.compile(r"^(?P<scheme>[a-z][a-z0-9]*)://")
FILE_SCHEME = "file"
# Where copies on this machine of objects that are not files here go (downloads for a reader,
# sharded checkpoints on their way to or from the storage); unset: the system's temporary
# directory.
SPOOL_DIR_ENV = "TRAINER_SPOOL_DIR"


def spool_directory() -> str | None:
    """The directory for local copies of objects (``SPOOL_DIR_ENV``), None for the default."""
    return os.environ.get(SPOOL_DIR_ENV) or None


class StorageError(OSError):
    """A storage cannot be opened or used (an unknown scheme, a bucket that does not exist, a
    refused credential): one line naming the root."""


class Sink(Protocol):
    """What a producer writes an object's bytes into: a file object that can only append
    (``torch.save`` needs ``write`` and ``flush``, never ``seek`` or ``tell``)."""

    def write(self, data: bytes | bytearray | memoryview) -> int: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class Written:
    """What :meth:`RunStorage.write` committed: its name, sha256 (hex) and size in bytes."""

    name: str
    sha256: str
    size: int


class RunStorage(ABC):
    """One run's root on one medium. Instances are plain and picklable: the checkpoint writer
    process receives the store, storage included, whole (a backend with a client opens it
    lazily, per process). Errors reading or writing are ``OSError``s (``FileNotFoundError``
    for an absent object), whatever the medium, so callers handle them once."""

    # -- the root -----------------------------------------------------------------------------

    @property
    @abstractmethod
    def location(self) -> str:
        """The root as a person names it in a message (the path or URL as given)."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """The root's canonical name: two roots are the same place exactly when equal, and a
        place inside a root has the root's identity, a slash, then more."""

    def location_of(self, name: str) -> str:
        """Where object ``name`` is, for messages."""
        return f"{self.location.rstrip('/')}/{name}"

    def encloses(self, other: RunStorage) -> bool:
        """``other`` is this root or a place inside it (a run must not warm-start from
        itself)."""
        mine, theirs = self.identity.rstrip("/"), other.identity.rstrip("/")
        return theirs == mine or theirs.startswith(f"{mine}/")

    @abstractmethod
    def unusable(self) -> str | None:
        """Why a run cannot keep its objects here, in words that follow the root (``exists and
        is not a directory``); None when it can. Creates nothing, so a refusal leaves nothing
        behind."""

    @abstractmethod
    def missing(self) -> str | None:
        """Why there is nothing here to read (``does not exist``, ``is not a directory``); None
        when the root is there, objects or not."""

    @abstractmethod
    def create(self) -> None:
        """Make the root ready for writes (a directory and its parents); idempotent."""

    def refusal(self, *, create_bucket: bool = False) -> str | None:
        """Why a run cannot start here (:meth:`unusable`), but for a missing bucket that
        ``--create-bucket`` makes first."""
        problem = self.unusable()
        if problem is not None and create_bucket and self.lacks_bucket():
            return None
        return problem

    def lacks_bucket(self) -> bool:
        """Object storage: the bucket this root is in does not exist yet (what
        :meth:`create_bucket` makes). A root not in a bucket never lacks one."""
        return False

    def create_bucket(self) -> None:
        """Object storage: make the bucket this root is in unless it exists (``--create-bucket``;
        idempotent, several ranks may ask at once). A root not in a bucket refuses, so the flag
        on a directory is a clear error rather than a silent no-op."""
        raise StorageError(
            f"{self.location} is not in a bucket: --create-bucket is for object-storage roots "
            "(s3://BUCKET/PREFIX)"
        )

    @abstractmethod
    def parent(self) -> tuple[RunStorage, str]:
        """This root read as one object of the root above it (``--init-from FILE``)."""

    def local_directory(self) -> Path | None:
        """The root as a directory of this machine's filesystem, when it is one."""
        return None

    # -- objects ------------------------------------------------------------------------------

    @abstractmethod
    def exists(self, name: str) -> bool:
        """Object ``name`` is there (committed or not: only the manifest says committed)."""

    @abstractmethod
    def read_bytes(self, name: str) -> bytes:
        """A small object whole (the manifest, the metrics); FileNotFoundError when absent."""

    @abstractmethod
    def local_file(self, name: str) -> AbstractContextManager[Path]:
        """Object ``name`` as a file on this machine for the duration of the context (a
        mapping of it stays valid after): the file itself on the filesystem, a downloaded
        copy elsewhere. FileNotFoundError when absent."""

    @abstractmethod
    def write(
        self,
        name: str,
        produce: Callable[[Sink], object],
        *,
        direct: bool = False,
        delay_s: float = 0.0,
    ) -> Written:
        """Commit object ``name`` from what ``produce`` writes into the sink it is given:
        whole or not at all, replacing an object of that name. ``direct``: written by the
        background writer, keep it off this machine's caches where the medium allows.
        ``delay_s``: pause once the bytes are out and before they are committed (a test
        hook: a kill then lands while the write is in flight)."""

    @abstractmethod
    def append_line(self, name: str, line: str) -> None:
        """Add one line (no newline in it) at the end of text object ``name``, creating it."""

    @abstractmethod
    def copy(self, name: str, to: str) -> None:
        """Make ``to`` an atomic copy of ``name`` (a hard link where the medium has them)."""

    @abstractmethod
    def move(self, name: str, to: str) -> bool:
        """Rename ``name`` to ``to`` (its folder is created); False when ``name`` is gone."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove ``name``; nothing when it is already gone."""

    @abstractmethod
    def remove_partial_writes(self) -> None:
        """Discard what writes killed halfway left (never committed, so garbage by
        construction). Only while no write of this run is in flight."""


StorageRoot = RunStorage | str | os.PathLike[str]
Opener = Callable[[str], RunStorage]
_REGISTERED: dict[str, Opener] = {}


def register_backend(scheme: str, opener: Opener) -> None:
    """Roots ``SCHEME://...`` open with ``opener`` (a backend outside this package)."""
    if not _SCHEME.match(f"{scheme}://"):
        raise ValueError(f"a scheme is lowercase letters and digits, got {scheme!r}")
    _REGISTERED[scheme] = opener


def unregister_backend(scheme: str) -> None:
    _REGISTERED.pop(scheme, None)


def scheme_of(root: str) -> str:
    """``file`` for a path or a ``file://`` URL, else the URL's scheme."""
    matched = _SCHEME.match(root)
    return matched["scheme"] if matched else FILE_SCHEME


def schemes() -> list[str]:
    """Every scheme a root may have: this package's backends, then registered ones."""
    own = [info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]
    return sorted(own) + sorted(set(_REGISTERED) - set(own))


def open_storage(root: StorageRoot) -> RunStorage:
    """The storage of ``root`` (returned as it is when it is one already). Opening touches
    nothing on the medium; :meth:`RunStorage.unusable` asks it."""
    if isinstance(root, RunStorage):
        return root
    text = os.fspath(root)
    scheme = scheme_of(text)
    opener = _REGISTERED.get(scheme)
    if opener is None and scheme in schemes():
        opener = importlib.import_module(f"{__name__}.{scheme}").open_root
    if opener is None:
        allowed = ", ".join(f"{name}://" for name in schemes())
        raise StorageError(f"{text!r}: no storage for {scheme}://; allowed: a path, {allowed}")
    return opener(text)


def locate(root: StorageRoot) -> tuple[RunStorage, str | None] | None:
    """What ``root`` names: a run's root (``name`` None), one object of a root (a checkpoint
    file), or nothing there (None)."""
    storage = open_storage(root)
    if storage.missing() is None:
        return storage, None
    parent, name = storage.parent()
    return (parent, name) if parent.exists(name) else None
