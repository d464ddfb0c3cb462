"""The filesystem backend: a run's root is a directory (a path, or ``file://PATH``), shared by
the ranks when they run on several nodes (a ReadWriteMany claim) or on one (ReadWriteOnce).

Every object is a file of that directory, committed by ``trainer.durable_file`` (a temporary
``.NAME.tmp-PID`` file, O_DIRECT for the background writer, fsync, rename, fsync of the
directory), so a kill leaves the old file or the new one, and temporary files are the only
garbage. Reading needs no copy: :meth:`FileStorage.local_file` is the file itself, which the
checkpoint store memory-maps.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trainer.durable_file import (
    TEMPORARY_GLOB,
    fsync_directory,
    temporary_name,
    write_atomically,
)
from trainer.storage import RunStorage, Sink, Written

URL_PREFIX = "file://"


def open_root(root: str) -> FileStorage:
    return FileStorage(Path(root.removeprefix(URL_PREFIX)))


@dataclass(frozen=True)
class FileStorage(RunStorage):
    directory: Path

    @property
    def location(self) -> str:
        return str(self.directory)

    @property
    def identity(self) -> str:
        return str(self.directory.resolve())

    def location_of(self, name: str) -> str:
        return str(self.directory / name)

    def unusable(self) -> str | None:
        """A missing directory is fine when it can be created: its nearest existing ancestor
        is a directory this process may write."""
        path = self.directory
        try:
            if path.exists():
                if not path.is_dir():
                    return "exists and is not a directory"
                if not os.access(path, os.W_OK | os.X_OK):
                    return "is a directory this user may not write"
                return None
            ancestor = next(parent for parent in path.absolute().parents if parent.exists())
        except OSError as error:  # e.g. a parent this user may not search
            return f"cannot be inspected ({error.strerror or error})"
        if not ancestor.is_dir():
            return f"cannot be created: {ancestor} is not a directory"
        if not os.access(ancestor, os.W_OK | os.X_OK):
            return f"cannot be created: {ancestor} is a directory this user may not write"
        return None

    def missing(self) -> str | None:
        if not self.directory.exists():
            return "does not exist"
        if not self.directory.is_dir():
            return "is not a directory"
        return None

    def create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def parent(self) -> tuple[FileStorage, str]:
        return FileStorage(self.directory.parent), self.directory.name

    def local_directory(self) -> Path:
        return self.directory

    def exists(self, name: str) -> bool:
        return (self.directory / name).exists()

    def read_bytes(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()

    @contextlib.contextmanager
    def local_file(self, name: str) -> Iterator[Path]:
        path = self.directory / name
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file", str(path))
        yield path

    def write(
        self,
        name: str,
        produce: Callable[[Sink], object],
        *,
        direct: bool = False,
        delay_s: float = 0.0,
    ) -> Written:
        file = write_atomically(self.directory / name, produce, delay_s, direct=direct)
        return Written(name, file.digest.hexdigest(), file.size)

    def append_line(self, name: str, line: str) -> None:
        with (self.directory / name).open("a") as handle:
            handle.write(line + "\n")

    def copy(self, name: str, to: str) -> None:
        """A hard link costs no I/O; filesystems without links get an atomic copy instead."""
        source, target = self.directory / name, self.directory / to
        temporary = temporary_name(target)
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        try:
            os.link(source, temporary)
        except OSError:
            shutil.copyfile(source, temporary)
            with temporary.open("rb+") as handle:
                os.fsync(handle.fileno())
        temporary.replace(target)
        fsync_directory(target.parent)

    def move(self, name: str, to: str) -> bool:
        source, target = self.directory / name, self.directory / to
        if not source.exists():
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        source.replace(target)
        fsync_directory(self.directory)
        return True

    def delete(self, name: str) -> None:
        """A directory (a sharded checkpoint) goes with everything in it."""
        path = self.directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            return
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def remove_partial_writes(self) -> None:
        for stale in self.directory.glob(TEMPORARY_GLOB):
            if stale.is_dir() and not stale.is_symlink():  # a sharded checkpoint's staging
                shutil.rmtree(stale, ignore_errors=True)
                continue
            with contextlib.suppress(OSError):
                stale.unlink()
