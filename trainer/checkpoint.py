"""The checkpoint store: what is on disk and how it gets there safely. Atomic commit, a
manifest with checksums, keep-K retention, verification with fallback to the previous
checkpoint, and the inspection command. No process or thread of its own: the trainer's
writer (``trainer.async_writer``) decides *when and where* a commit runs, this module is
*what* a commit and a read are, so both stay testable without the other.

Layout of a checkpoint directory::

    checkpoint-e000025-s000000.pt   one file per checkpoint (epochs completed, step in epoch)
    manifest.json                   committed checkpoints, oldest first, with sha256 and size
    snapshot.pt                     the latest committed checkpoint (hard link, or copy)
    metrics.jsonl                   one JSON line per epoch (written by trainer.metrics)
    rejected/                       checkpoints a resume found corrupt, set aside (never deleted)

The manifest is the commit point: a checkpoint file that is not listed there (a write that was
killed) is never used. Run ``python -m trainer.checkpoint DIR`` to see what a resume would use.
What a file holds is ``trainer.checkpoint_schema``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import mmap
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy
import torch

from trainer.checkpoint_schema import FORMAT_VERSION, CheckpointError, TrainingCheckpoint

MANIFEST_NAME = "manifest.json"
SNAPSHOT_NAME = "snapshot.pt"
# Test and debugging hook: seconds a commit pauses after the bytes are in the temporary file
# and before fsync + rename, so a kill can land while a write is in flight.
WRITE_DELAY_ENV = "TRAINER_CHECKPOINT_WRITE_DELAY"
REJECTED_DIR = "rejected"
_HASH_CHUNK = 16 << 20

LOG = logging.getLogger("trainer")


@dataclass(frozen=True)
class CheckpointEntry:
    file: str
    sha256: str
    size: int
    epochs_completed: int
    step_in_epoch: int
    world_size: int
    fingerprint: str
    format_version: int = FORMAT_VERSION

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CheckpointEntry:
        return cls(**{name: raw[name] for name in cls.__dataclass_fields__})


def checkpoint_name(epochs_completed: int, step_in_epoch: int) -> str:
    return f"checkpoint-e{epochs_completed:06d}-s{step_in_epoch:06d}.pt"


def model_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """Equal exactly when names, dtypes, shapes and every bit of the weights are equal."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        # The numpy view is hashed in place: no copy, and hashlib releases the GIL meanwhile.
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable. Some shared-volume drivers (FUSE-backed ReadWriteMany claims)
    refuse fsync on a directory; the rename has happened by then, so that is not a failed
    checkpoint, only one whose durability rests on the driver."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)


# Direct I/O (O_DIRECT) moves data in whole blocks from block-aligned memory at block-aligned
# offsets; 4 KiB covers the logical block size of the disks and network volumes in use. The
# bounce buffer is a few MiB so each write is one large request.
_DIRECT_ALIGN = 4096
_DIRECT_CHUNK = 8 << 20


class _ChecksummedFile:
    """The file object ``torch.save`` writes into: hashes and counts the bytes on their way to
    disk, which saves reading the file back for its sha256.

    With ``direct`` the bytes go to the device with O_DIRECT, bypassing the page cache. That is
    for the background writer: a buffered write of a large state has the kernel allocate
    page-cache pages and later write them back, work done in kernel threads at normal priority
    on any core, the training loop's included, whereas a direct write is paid by the (niced)
    writer itself and leaves no dirty pages behind. Tensor data that starts block-aligned in
    memory and in the file (see :func:`_storages_aligned_for_direct_io`) goes to the device
    straight from where it lies; everything else through an aligned bounce buffer. A
    filesystem that refuses O_DIRECT (tmpfs, some FUSE volumes) gets buffered writes."""

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
            whole = total - total % _DIRECT_ALIGN
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
        if len(view) < _DIRECT_CHUNK or (self._written + self._filled) % _DIRECT_ALIGN:
            return False
        return numpy.frombuffer(view, dtype=numpy.uint8).ctypes.data % _DIRECT_ALIGN == 0

    def _drain(self) -> None:
        assert self._bounce is not None
        length = -(-self._filled // _DIRECT_ALIGN) * _DIRECT_ALIGN
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


def _storages_aligned_for_direct_io() -> contextlib.AbstractContextManager[Any]:
    """``torch.save`` pads the zip so each tensor's bytes start at a multiple of this (64 by
    default); at the block size, tensors in (page-aligned) shared memory go to the device with
    no copy. Any alignment loads the same; torch before 2.6 has no such setting."""
    try:
        from torch.utils.serialization import config
    except ImportError:
        return contextlib.nullcontext()
    return config.patch({"save.storage_alignment": _DIRECT_ALIGN})


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


def _write_bytes_atomically(
    target: Path,
    write: Callable[[_ChecksummedFile], None],
    delay_s: float = 0.0,
    *,
    direct: bool = False,
) -> _ChecksummedFile:
    """Write ``target`` through a temporary file, fsync, rename, fsync the directory. Returns
    the file object, which knows the sha256 and size of what was written."""
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        fd, direct = _open_temporary(temporary, direct=direct)
        try:
            file = _ChecksummedFile(fd, direct=direct)
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
    _fsync_dir(target.parent)
    return file


def read_manifest(directory: Path) -> list[CheckpointEntry]:
    path = directory / MANIFEST_NAME
    if not path.exists():
        return []
    try:
        raw = json.loads(path.read_text())
        return [CheckpointEntry.from_json(item) for item in raw["checkpoints"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"manifest {path} is unreadable: {error}") from error


def _write_manifest(directory: Path, entries: Sequence[CheckpointEntry]) -> None:
    payload = {
        "format_version": FORMAT_VERSION,
        "checkpoints": [asdict(entry) for entry in entries],
    }
    encoded = (json.dumps(payload, indent=2) + "\n").encode()
    _write_bytes_atomically(directory / MANIFEST_NAME, lambda file: file.write(encoded))


def load_checkpoint(path: Path, *, mmap: bool = False) -> TrainingCheckpoint:
    """``mmap``: map the file instead of reading it; the tensors are backed by the page cache
    until the caller copies them into its model, so no second copy of the state is made."""
    # weights_only: a checkpoint holds tensors and plain containers only, so loading it never
    # runs code from the (shared, writable) volume.
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    return TrainingCheckpoint.from_state(state, str(path))


def _sha256_of(data: Any) -> str:
    digest = hashlib.sha256()
    with memoryview(data) as view:  # released on return, so a mapped file can be closed
        for start in range(0, len(view), _HASH_CHUNK):
            with view[start : start + _HASH_CHUNK] as chunk:
                digest.update(chunk)  # hashlib releases the GIL meanwhile
    return digest.hexdigest()


def read_verified(
    path: Path, sha256: str | None, size: int | None
) -> tuple[TrainingCheckpoint, str]:
    """Read ``path`` once; check size and sha256 over exactly the bytes that are deserialised.

    The file is memory-mapped: the hash (in a thread) faults its pages into the page cache,
    and ``torch.load(mmap=True)`` maps those same pages, so the volume is read once and the
    state is never held twice (raw bytes plus a deserialised copy: 2x the checkpoint in RAM,
    and a copy that costs as much as the read). Both see the same inode (checked: checkpoint
    files are only ever renamed into place, never rewritten). Returns the state and the sha256
    (useful when the caller had none to compare with)."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read: {error}") from error
    with handle:
        info = os.fstat(handle.fileno())
        if size is not None and info.st_size != size:
            raise CheckpointError(
                f"{path} has {info.st_size} bytes, manifest says {size} (truncated?)"
            )
        if info.st_size == 0:
            raise CheckpointError(f"{path} is empty")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            with contextlib.suppress(AttributeError, OSError):  # madvise: Linux, Python >= 3.8
                view.madvise(mmap.MADV_SEQUENTIAL)
            digest: list[str] = []
            hasher = threading.Thread(target=lambda: digest.append(_sha256_of(view)), name="sha256")
            hasher.start()
            loaded: TrainingCheckpoint | None = None
            problem: BaseException | None = None
            try:
                loaded = load_checkpoint(path, mmap=True)
                same = path.stat()
                if (same.st_ino, same.st_dev) != (info.st_ino, info.st_dev):
                    problem = CheckpointError(f"{path} was replaced while it was being read")
            except Exception as error:  # judged after the hash: a bad hash is the better diagnosis
                problem = error
            finally:
                hasher.join()
    if sha256 is not None and digest[0] != sha256:
        raise CheckpointError(f"{path} fails its sha256 check (corrupted)")
    if isinstance(problem, CheckpointError):
        raise problem
    if problem is not None or loaded is None:
        raise CheckpointError(f"{path} cannot be loaded: {problem}") from problem
    return loaded, digest[0]


@dataclass(frozen=True)
class Resumable:
    entry: CheckpointEntry
    path: Path
    checkpoint: TrainingCheckpoint
    skipped: tuple[str, ...]  # why newer checkpoints were passed over
    skipped_entries: tuple[CheckpointEntry, ...] = ()


def find_resumable(directory: Path) -> Resumable | None:
    """Newest checkpoint that verifies; None when nothing was ever committed. Raises
    CheckpointError when checkpoints exist but none is usable, rather than silently starting
    over and later deleting them."""
    entries = read_manifest(directory)
    skipped: list[str] = []
    bad: list[CheckpointEntry] = []
    for entry in reversed(entries):
        try:
            checkpoint, _ = read_verified(directory / entry.file, entry.sha256, entry.size)
        except CheckpointError as error:
            skipped.append(str(error))
            bad.append(entry)
            LOG.warning("checkpoint unusable, falling back to the previous one: %s", error)
            continue
        return Resumable(entry, directory / entry.file, checkpoint, tuple(skipped), tuple(bad))
    if entries:
        raise CheckpointError(
            f"no usable checkpoint in {directory}: " + "; ".join(skipped) + ". Move the "
            "directory aside (or pass another --checkpoint-dir) to start from scratch."
        )
    return None


def set_aside_skipped(directory: Path, found: Resumable) -> list[Path]:
    """After a fallback: drop the entries that failed verification from the manifest and move
    their files to DIR/rejected/ (kept for a post-mortem, never deleted by us). Without this,
    retention counts the corrupt entries as kept checkpoints and may delete the good one the
    run resumed from. The manifest is rewritten first (the commit point), so a kill between
    the two steps leaves at worst a stray file in DIR, never a manifest naming a moved file."""
    if not found.skipped_entries:
        return []
    bad = {entry.file for entry in found.skipped_entries}
    _write_manifest(directory, [e for e in read_manifest(directory) if e.file not in bad])
    point_snapshot_at(directory, found.path)
    rejected = directory / REJECTED_DIR
    rejected.mkdir(exist_ok=True)
    moved: list[Path] = []
    for name in sorted(bad):
        source = directory / name
        if source.exists():
            target = rejected / name
            source.replace(target)
            moved.append(target)
    _fsync_dir(directory)
    return moved


def remove_stale_temporaries(directory: Path) -> None:
    """Temp files left by a killed write are garbage by construction (never in the manifest)."""
    for stale in directory.glob(".*.tmp-*"):
        with contextlib.suppress(OSError):
            stale.unlink()


@dataclass(frozen=True)
class CheckpointStore:
    """One run's checkpoint directory, as the writer sees it: where commits go and how many are
    kept. Plain and picklable, so the writer process receives it whole."""

    directory: Path
    keep: int
    write_delay_s: float = 0.0  # see WRITE_DELAY_ENV

    def __post_init__(self) -> None:
        if self.keep < 2:
            raise ValueError(f"keep must be >= 2 so a fallback exists, got {self.keep}")

    def commit(
        self, state: Mapping[str, Any], epochs: int, step: int, *, direct_io: bool = False
    ) -> CheckpointEntry:
        """Write, verify-able and atomically: file, then manifest (the commit), then snapshot
        link, then retention. Safe to kill at any point. ``state`` is
        :meth:`TrainingCheckpoint.to_state`'s dictionary (or a staged copy of it).
        ``direct_io``: write the file past the page cache (see :class:`_ChecksummedFile`)."""
        checkpoint = TrainingCheckpoint.from_state(state, "the state to commit")
        name = checkpoint_name(epochs, step)
        target = self.directory / name
        with _storages_aligned_for_direct_io() if direct_io else contextlib.nullcontext():
            written = _write_bytes_atomically(
                target, lambda file: torch.save(state, file), self.write_delay_s, direct=direct_io
            )
        entry = CheckpointEntry(
            file=name,
            sha256=written.digest.hexdigest(),
            size=written.size,
            epochs_completed=epochs,
            step_in_epoch=step,
            world_size=checkpoint.world_size,
            fingerprint=checkpoint.config_fingerprint,
        )
        previous = [item for item in read_manifest(self.directory) if item.file != name]
        kept = [*previous, entry][-self.keep :]
        _write_manifest(self.directory, kept)  # the commit point
        point_snapshot_at(self.directory, target)
        kept_files = {item.file for item in kept}
        for old in previous:
            if old.file not in kept_files:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / old.file).unlink()
        return entry


def point_snapshot_at(directory: Path, target: Path) -> None:
    """Keep DIR/snapshot.pt (what the tutorial reads) equal to the newest checkpoint. A hard
    link costs no I/O; filesystems without links get an atomic copy instead."""
    snapshot = directory / SNAPSHOT_NAME
    temporary = directory / f".{SNAPSHOT_NAME}.tmp-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    try:
        os.link(target, temporary)
    except OSError:
        shutil.copyfile(target, temporary)
        with temporary.open("rb+") as handle:
            os.fsync(handle.fileno())
    temporary.replace(snapshot)
    _fsync_dir(directory)


def describe(directory: Path) -> dict[str, Any]:
    """What ``python -m trainer.checkpoint DIR`` prints."""
    if not directory.exists():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory")
    found = find_resumable(directory)
    if found is None:
        raise CheckpointError(f"no committed checkpoint in {directory} (no {MANIFEST_NAME})")
    checkpoint = found.checkpoint
    return {
        "path": str(found.path),
        "epochs_completed": checkpoint.epochs_run,
        "step_in_epoch": found.entry.step_in_epoch,
        "world_size": checkpoint.world_size,
        "model_sha256": model_sha256(checkpoint.model_state),
        "sha256": found.entry.sha256,
        "size": found.entry.size,
        "config": checkpoint.config,
        "config_fingerprint": checkpoint.config_fingerprint,
        "format_version": checkpoint.format_version,
        "skipped": list(found.skipped),
        "origin": checkpoint.origin,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.checkpoint",
        description="Print, as JSON, the checkpoint a resume from DIR would use.",
    )
    parser.add_argument("directory", metavar="DIR", type=Path, help="checkpoint directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="warning: %(message)s")
    try:
        info = describe(args.directory)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(info, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
