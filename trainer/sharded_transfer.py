"""A sharded checkpoint's files between this machine and a run's storage that is not a directory
here (an object store). DCP reads and writes files, so on such a root a rank's shards are written
by DCP into a private spool directory first, then uploaded, each as object ``FOLDER/FILE``
through :meth:`RunStorage.write` (whole or absent, hashed on its way out: the sha256 the
manifest lists is of the bytes that went out); a reader gets them back into a local directory,
hashed on arrival so the store checks them against the manifest before DCP reads any of them.
On a filesystem root neither is needed: DCP writes and reads the checkpoint's directory itself.
Spool directories are under ``TRAINER_SPOOL_DIR`` when it is set (``trainer.storage``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from trainer.sharded import hash_file
from trainer.storage import RunStorage, Sink, spool_directory

_CHUNK = 16 << 20


@contextlib.contextmanager
def spooled(purpose: str) -> Iterator[Path]:
    """A private directory on this machine for one checkpoint's files, removed after use (a
    killed process leaves it in the spool directory, never in the run's storage)."""
    with tempfile.TemporaryDirectory(prefix=f".{purpose}-", dir=spool_directory()) as directory:
        yield Path(directory)


def upload(
    storage: RunStorage, folder: str, directory: Path, *, delay_s: float = 0.0
) -> dict[str, dict[str, Any]]:
    """Every file of ``directory`` as object ``folder/FILE``; returns ``{FILE: {sha256, size}}``
    of what was written. ``delay_s``: the storage's test hook, before each upload completes."""
    written: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.iterdir()):
        if not path.is_file():
            continue
        done = storage.write(
            f"{folder}/{path.name}",
            lambda sink, path=path: _copy(path, sink),  # type: ignore[misc]
            delay_s=delay_s,
        )
        written[path.name] = {"sha256": done.sha256, "size": done.size}
    return written


def download(
    storage: RunStorage, folder: str, names: Iterable[str], into: Path | None
) -> dict[str, dict[str, Any]]:
    """Objects ``folder/NAME`` hashed as they are on this machine: ``{NAME: {sha256, size}}``.
    ``into``: keep each as ``into/NAME`` (for DCP to read once the caller has checked them);
    None: only hash them. FileNotFoundError (its filename the object's location) for an
    absent one."""
    found: dict[str, dict[str, Any]] = {}
    for name in sorted(names):
        with storage.local_file(f"{folder}/{name}") as path:
            found[name] = hash_file(path)
            if into is not None:
                _keep(path, into / name)
    return found


def _copy(path: Path, sink: Sink) -> None:
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            sink.write(chunk)


def _keep(path: Path, target: Path) -> None:
    """``path`` (a download the storage removes after use) kept as ``target``: a second name
    for the same file where both are on one filesystem, else a copy."""
    try:
        os.link(path, target)
    except OSError:
        shutil.copyfile(path, target)
