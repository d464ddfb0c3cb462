"""Durable files: a file appears whole under its name or not at all, and its sha256 and size are
known without reading it back. The filesystem backend of a run's storage
(``trainer.storage.file``) writes every object through :func:`write_atomically`; this module
knows nothing of checkpoints.

A write goes to a temporary file in the target's directory, is fsynced, renamed over the target,
and the directory is fsynced, so a kill at any point leaves either the old file or the new one.
With ``direct`` the bytes bypass the page cache (O_DIRECT); see :class:`ChecksummedFile`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy

# Direct I/O (O_DIRECT) moves data in whole blocks from block-aligned memory at block-aligned
# offsets; 4 KiB covers the logical block size of the disks and network volumes in use. The
# bounce buffer is a few MiB so each write is one large request.
DIRECT_ALIGN = 4096
_DIRECT_CHUNK = 8 << 20

LOG = logging.getLogger("trainer")


def fsync_directory(directory: Path) -> None:
    """Make a rename durable. Some shared-volume drivers (FUSE-backed ReadWriteMany claims)
    refuse fsync on a directory; the rename has happened by then, so that is not a failed
    write, only one whose durability rests on the driver."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)


class ChecksummedFile:
    """The file object a serialiser (``torch.save``) writes into: hashes and counts the bytes on
    their way to disk, which saves reading the file back for its sha256.

    With ``direct`` the bytes go to the device with O_DIRECT, bypassing the page cache. That is
    for the background writer: a buffered write of a large state has the kernel allocate
    page-cache pages and later write them back, work done in kernel threads at normal priority
    on any core, the training loop's included, whereas a direct write is paid by the (niced)
    writer itself and leaves no dirty pages behind. Data that starts block-aligned in memory
    and in the file (see :func:`storages_aligned_for_direct_io`) goes to the device straight
    from where it lies; everything else through an aligned bounce buffer. A filesystem that
    refuses O_DIRECT (tmpfs, some FUSE volumes) gets buffered writes."""

    def __init__(self, fd: int, *, direct: bool) -> None:
        self._fd = fd
        self.direct = direct
        self.digest = hashlib.sha256()
        self.size = 0
        self._bounce: mmap.mmap | None = mmap.mmap(-1, _DIRECT_CHUNK) if direct else None
        self._filled = 0  # bytes waiting in the bounce buffer
        self._written = 0  # bytes on disk so far (a multiple of the block size until finish)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        self.size += total
        if self._bounce is None:
            self.digest.update(view)  # hashlib releases the GIL for large buffers
            _write_all(self._fd, view)
            return total
        if self._aligned_in_memory_and_file(view):
            if self._filled:
                self._drain()  # whole blocks: it ends where this data starts, block-aligned
            whole = total - total % DIRECT_ALIGN
            self.digest.update(view[:whole])
            self._write(view[:whole])
            view = view[whole:]
        while view:
            take = min(len(view), _DIRECT_CHUNK - self._filled)
            self._bounce[self._filled : self._filled + take] = view[:take]
            # Hashed from the bounce buffer, while the chunk is still in cache.
            with memoryview(self._bounce) as bounce:
                self.digest.update(bounce[self._filled : self._filled + take])
            self._filled += take
            view = view[take:]
            if self._filled == _DIRECT_CHUNK:
                self._drain()
        return total

    def flush(self) -> None:
        """Nothing is buffered but the bounce buffer, which only ``finish`` may write short."""

    def finish(self) -> None:
        """Write what the bounce buffer holds, padded to a whole block, then cut the padding."""
        if self._bounce is None:
            return
        if self._filled:
            self._drain()
            os.ftruncate(self._fd, self.size)
        self._bounce.close()
        self._bounce = None

    def _aligned_in_memory_and_file(self, view: memoryview) -> bool:
        if len(view) < _DIRECT_CHUNK or (self._written + self._filled) % DIRECT_ALIGN:
            return False
        return numpy.frombuffer(view, dtype=numpy.uint8).ctypes.data % DIRECT_ALIGN == 0

    def _drain(self) -> None:
        assert self._bounce is not None
        length = -(-self._filled // DIRECT_ALIGN) * DIRECT_ALIGN
        with memoryview(self._bounce) as bounce:
            self._write(bounce[:length])
        self._filled = 0

    def _write(self, blocks: memoryview) -> None:
        try:
            _write_all(self._fd, blocks)
        except OSError as error:
            if error.errno != errno.EINVAL or not self.direct:
                raise
            # Accepted at open, refused at write (some FUSE volumes): go on buffered. The
            # failed call wrote nothing, so the offset is unchanged.
            LOG.debug("O_DIRECT refused by the volume (%s): writing through the cache", error)
            self.direct = False
            flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
            fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
            _write_all(self._fd, blocks)
        self._written += len(blocks)


def storages_aligned_for_direct_io() -> contextlib.AbstractContextManager[Any]:
    """``torch.save`` pads the zip so each tensor's bytes start at a multiple of this (64 by
    default); at the block size, tensors in (page-aligned) shared memory go to the device with
    no copy. Any alignment loads the same; torch before 2.6 has no such setting."""
    try:
        from torch.utils.serialization import config
    except ImportError:
        return contextlib.nullcontext()
    return config.patch({"save.storage_alignment": DIRECT_ALIGN})


def _write_all(fd: int, view: memoryview) -> None:
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])


def _open_temporary(path: Path, *, direct: bool) -> tuple[int, bool]:
    """A new file for writing, with O_DIRECT if asked and the filesystem takes it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o666), True
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            LOG.debug("O_DIRECT refused by %s (%s): writing through the cache", path.parent, error)
    return os.open(path, flags, 0o666), False


def temporary_name(target: Path) -> Path:
    """Where :func:`write_atomically` stages ``target`` (``.NAME.tmp-PID``): never a committed
    name, so a file of this shape that outlives its writer is garbage by construction."""
    return target.with_name(f".{target.name}.tmp-{os.getpid()}")


TEMPORARY_GLOB = ".*.tmp-*"


def write_atomically(
    target: Path,
    write: Callable[[ChecksummedFile], object],
    delay_s: float = 0.0,
    *,
    direct: bool = False,
) -> ChecksummedFile:
    """Write ``target`` through a temporary file, fsync, rename, fsync the directory. Returns
    the file object, which knows the sha256 and size of what was written. ``delay_s`` pauses
    after the bytes are written and before fsync + rename (a test hook: a kill then lands
    while the write is in flight)."""
    temporary = temporary_name(target)
    try:
        fd, direct = _open_temporary(temporary, direct=direct)
        try:
            file = ChecksummedFile(fd, direct=direct)
            write(file)
            file.finish()
            if delay_s > 0:
                time.sleep(delay_s)
            os.fsync(fd)
        finally:
            os.close(fd)
        temporary.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    fsync_directory(target.parent)
    return file
