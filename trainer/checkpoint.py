"""Checkpoint storage: atomic writes in the background, a manifest with checksums, keep-K
retention, and verification with fallback to the previous checkpoint.

Layout of a checkpoint directory::

    checkpoint-e000025-s000000.pt   one file per checkpoint (epochs completed, step in epoch)
    manifest.json                   committed checkpoints, oldest first, with sha256 and size
    snapshot.pt                     the latest committed checkpoint (hard link, or copy)
    metrics.jsonl                   one JSON line per epoch (written by trainer.metrics)
    rejected/                       checkpoints a resume found corrupt, set aside (never deleted)

The manifest is the commit point: a checkpoint file that is not listed there (a write that was
killed) is never used. Run ``python -m trainer.checkpoint DIR`` to see what a resume would use.

Where a checkpoint is written: inline when that is cheap, by a writer process when it is not
(see :class:`CheckpointManager`); either way the loop never waits longer than a synchronous save.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import logging
import mmap
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
SNAPSHOT_NAME = "snapshot.pt"
# Test and debugging hook: seconds the writer pauses after the bytes are in the temporary file
# and before fsync + rename, so a kill can land while a write is in flight.
WRITE_DELAY_ENV = "TRAINER_CHECKPOINT_WRITE_DELAY"
REQUIRED_KEYS = ("FORMAT_VERSION", "MODEL_STATE", "EPOCHS_RUN", "WORLD_SIZE", "CONFIG_FINGERPRINT")
REJECTED_DIR = "rejected"
# The write policy's two knobs (see CheckpointManager). A state this large is handed to a writer
# process from the first save; below it, a save is written inline until one inline write takes
# longer than INLINE_BUDGET_S, measured.
BACKGROUND_MIN_BYTES = 64 << 20
INLINE_BUDGET_S = 0.25
_HASH_CHUNK = 16 << 20

LOG = logging.getLogger("trainer")


class CheckpointError(RuntimeError):
    """A checkpoint directory or file cannot be used."""


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


def copy_to_cpu(value: Any, reuse: Any = None, *, shared: bool = False) -> Any:
    """A private CPU copy, so training can keep mutating its tensors while a thread writes.

    ``reuse`` is the previous copy (already committed): tensors of the same shape and dtype are
    copied into it instead of freshly allocated, which avoids page-faulting a large new buffer
    on every checkpoint and keeps the training loop's stall to a memcpy. ``shared`` allocates
    new buffers in shared memory, so a writer process can read them without another copy."""
    if isinstance(value, torch.Tensor):
        source = value.detach()
        if (
            isinstance(reuse, torch.Tensor)
            and reuse.shape == source.shape
            and reuse.dtype == source.dtype
            and reuse.device.type == "cpu"
        ):
            return reuse.copy_(source)
        if not shared:
            return source.to("cpu", copy=True)
        return _shared_empty(source).copy_(source)
    if isinstance(value, dict):
        old = reuse if isinstance(reuse, dict) else {}
        return {key: copy_to_cpu(item, old.get(key), shared=shared) for key, item in value.items()}
    if isinstance(value, list | tuple):
        old_items = list(reuse) if isinstance(reuse, list | tuple) else []
        old_items += [None] * (len(value) - len(old_items))
        copied = [
            copy_to_cpu(item, old, shared=shared)
            for item, old in zip(value, old_items, strict=False)
        ]
        return copied if isinstance(value, list) else tuple(copied)
    return value


def _shared_empty(like: torch.Tensor) -> torch.Tensor:
    """An uninitialised shared-memory tensor shaped like ``like``, allocated in shared memory
    directly: ``empty().share_memory_()`` allocates private memory, faults it in and copies
    it into a shared segment, three passes over a buffer the caller overwrites anyway."""
    nbytes = like.nelement() * like.element_size()
    try:
        storage = torch.UntypedStorage._new_shared(nbytes)
    except (AttributeError, TypeError):  # a torch without the private constructor
        return torch.empty(like.shape, dtype=like.dtype, device="cpu").share_memory_()
    return torch.empty(0, dtype=like.dtype).set_(storage, 0, like.shape)


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


class _HashingWriter:
    """File wrapper that hashes bytes on their way to disk, saving a second read of the file."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self._raw.write(data)

    def flush(self) -> None:
        self._raw.flush()


def _write_bytes_atomically(target: Path, write: Callable[[Any], None], delay_s: float) -> None:
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with temporary.open("wb") as raw:
            write(raw)
            raw.flush()
            if delay_s > 0:
                time.sleep(delay_s)
            os.fsync(raw.fileno())
        temporary.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _fsync_dir(target.parent)


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
    _write_bytes_atomically(directory / MANIFEST_NAME, lambda raw: raw.write(encoded), 0.0)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def load_checkpoint(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """``mmap``: map the file instead of reading it; the tensors are backed by the page cache
    until the caller copies them into its model, so no second copy of the state is made."""
    # weights_only: a checkpoint holds tensors and plain containers only, so loading it never
    # runs code from the (shared, writable) volume.
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} does not hold a checkpoint dictionary")
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}")
    return state


def _sha256_of(data: Any) -> str:
    digest = hashlib.sha256()
    with memoryview(data) as view:  # released on return, so a mapped file can be closed
        for start in range(0, len(view), _HASH_CHUNK):
            with view[start : start + _HASH_CHUNK] as chunk:
                digest.update(chunk)  # hashlib releases the GIL meanwhile
    return digest.hexdigest()


def read_verified(path: Path, sha256: str | None, size: int | None) -> tuple[dict[str, Any], str]:
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
            loaded: dict[str, Any] | None = None
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
    if loaded["FORMAT_VERSION"] > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format version {loaded['FORMAT_VERSION']}, this trainer reads "
            f"up to {FORMAT_VERSION}"
        )
    return loaded, digest[0]


def verify(directory: Path, entry: CheckpointEntry) -> dict[str, Any]:
    """The loaded checkpoint, or CheckpointError saying why this entry cannot be used."""
    state, _ = read_verified(directory / entry.file, entry.sha256, entry.size)
    return state


@dataclass(frozen=True)
class Resumable:
    entry: CheckpointEntry
    path: Path
    state: dict[str, Any]
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
            state = verify(directory, entry)
        except CheckpointError as error:
            skipped.append(str(error))
            bad.append(entry)
            LOG.warning("checkpoint unusable, falling back to the previous one: %s", error)
            continue
        return Resumable(entry, directory / entry.file, state, tuple(skipped), tuple(bad))
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


def _share(value: Any) -> None:
    """Move every tensor of a snapshot into shared memory (a no-op once it is there)."""
    if isinstance(value, torch.Tensor):
        value.share_memory_()
    elif isinstance(value, dict):
        for item in value.values():
            _share(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _share(item)


def state_bytes(value: Any) -> int:
    """Bytes of tensor data in a (nested) state: what a save copies and writes."""
    if isinstance(value, torch.Tensor):
        return value.nelement() * value.element_size()
    if isinstance(value, dict):
        return sum(state_bytes(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(state_bytes(item) for item in value)
    return 0


def _writer_process_main(conn: Any, directory: str, keep: int, delay_s: float) -> None:
    """Commits snapshots sent by the trainer. A separate process, because torch.save holds the
    GIL while it writes: on a thread it would stall the training loop almost as much as a
    synchronous save. It ignores SIGINT/SIGTERM (the trainer decides when to stop), says
    "ready" once its imports are done (until then the trainer writes inline instead of
    waiting for it), and exits when the trainer closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Hashing and serialising compete with the training loop for the same cores; the loop's
    # step time is what the job pays for, so the writer yields the CPU whenever both want it.
    with contextlib.suppress(OSError):
        os.nice(10)
    # The manifest's sha256 already guards every byte; skipping the zip's CRC32 saves a pass
    # over the data on a CPU the training loop may need.
    # (torch >= 2.6; the NGC 24.07 image ships 2.4, which always computes the CRC.)
    if hasattr(torch.serialization, "set_crc32_options"):
        torch.serialization.set_crc32_options(False)
    committer = CheckpointManager(Path(directory), keep, background=False, write_delay_s=delay_s)
    try:
        conn.send(("ready", None))
    except (BrokenPipeError, EOFError, OSError):
        return
    while True:
        try:
            state, epochs, step = conn.recv()
        except EOFError:
            return
        try:
            entry = committer.commit(state, epochs, step)
            conn.send(("ok", asdict(entry)))
        except Exception as error:
            conn.send(("error", f"{type(error).__name__}: {error}"))
        del state


class CheckpointManager:
    """Writes checkpoints for rank 0, inline or in the background, whichever stalls less.

    A background save costs the loop a copy of the state into a (reused, shared-memory)
    staging buffer; a writer process then commits it. That only pays when the write itself is
    slow compared with the copy, and a writer process is an interpreter importing torch (1-2 s
    of CPU that training shares). So:

    * a state of at least ``background_min_bytes`` (``prepare`` or the first save tells) gets
      the writer process started at once, in the background, and its staging buffer allocated;
    * smaller states are written inline, and each inline write is timed: once one takes longer
      than ``inline_budget_s`` the writer is started for the saves that follow;
    * a save never waits for the writer to start: until it says "ready", saves are inline.

    At most one write is in flight; ``wait`` blocks until it is committed (on SIGTERM and at the
    end of training). Where shared memory is unavailable a writer thread stands in."""

    def __init__(
        self,
        directory: Path,
        keep: int,
        *,
        background: bool = True,
        write_delay_s: float = 0.0,
        background_min_bytes: int = BACKGROUND_MIN_BYTES,
        inline_budget_s: float = INLINE_BUDGET_S,
    ) -> None:
        if keep < 2:
            raise ValueError(f"keep must be >= 2 so a fallback exists, got {keep}")
        self.directory = directory
        self.keep = keep
        self.background = background
        self.write_delay_s = write_delay_s
        self.background_min_bytes = background_min_bytes
        self.inline_budget_s = inline_budget_s
        self._use_process = background
        self._process: Any = None
        self._conn: Any = None
        self._ready = False
        self._pending = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._staging: dict[str, Any] | None = None  # the last committed copy, reused
        self.last_committed: CheckpointEntry | None = None
        self.last_mode: str | None = None  # "inline" | "background": how the last save went

    # -- policy -------------------------------------------------------------------------------

    def prepare(self, state: Mapping[str, Any]) -> None:
        """Called before training with a state shaped like the checkpoints to come: a large one
        starts the writer now and allocates the staging copy, so even the first save only
        copies into it. Called again after the first step, when optimizers have created their
        lazy slots (momentum, Adam moments: often as large as the model), it allocates only
        what is missing; without that the first save would allocate them inside the loop."""
        if self._pending or self._thread is not None:
            return  # the staging buffers are being written out; never overwrite them
        if self.background and state_bytes(state) >= self.background_min_bytes:
            self._start_writer()
            if self._use_process:
                self._stage(state)

    @property
    def writer_started(self) -> bool:
        return self._conn is not None

    def writer_ready(self) -> bool:
        """True once saves can be handed over (the writer process said "ready")."""
        return self._writer_ready()

    def _writer_ready(self) -> bool:
        if not self._use_process:
            return self.background and self._staging is not None  # the thread fallback
        if self._conn is None:
            return False
        if not self._ready:
            try:
                if self._conn.poll():
                    status, _ = self._conn.recv()
                    self._ready = status == "ready"
            except (EOFError, OSError):
                LOG.warning("checkpoint writer process died while starting: writing inline")
                self._abandon_writer()
        return self._ready

    # -- saving -------------------------------------------------------------------------------

    def save(
        self,
        state: Mapping[str, Any],
        *,
        epochs_completed: int,
        step_in_epoch: int,
        final: bool = False,
    ) -> None:
        """``final``: nothing trains after this save (end of training, SIGTERM), so it is
        committed right here; handing it over would only add a copy."""
        self.wait()  # the previous write is committed, so its buffers are free to reuse
        size = state_bytes(state)
        if self.background and not final and size >= self.background_min_bytes:
            self._start_writer()
        if self.background and not final and self._writer_ready():
            snapshot = self._stage(state)
            if self._use_process:
                try:
                    self._conn.send((snapshot, epochs_completed, step_in_epoch))
                    self._pending = True
                    self.last_mode = "background"
                    return
                except (OSError, RuntimeError) as error:
                    LOG.warning("checkpoint writer process unavailable (%s): writing inline", error)
                    self._abandon_writer()
            else:
                self._thread = threading.Thread(
                    target=self._commit_in_thread,
                    args=(snapshot, epochs_completed, step_in_epoch),
                    name="checkpoint-writer",
                )
                self._thread.start()
                self.last_mode = "background"
                return
        started = time.perf_counter()
        try:
            entry = self.commit(dict(state), epochs_completed, step_in_epoch)
        except (OSError, RuntimeError) as error:
            raise CheckpointError(f"checkpoint write failed: {error}") from error
        self._committed(entry)
        self.last_mode = "inline"
        if self.background and time.perf_counter() - started > self.inline_budget_s:
            self._start_writer()  # measured: inline writes now cost more than a handover

    def _stage(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Copy into the staging buffers (shared memory for the writer process)."""
        try:
            snapshot = copy_to_cpu(dict(state), self._staging, shared=self._use_process)
            if self._use_process:
                _share(snapshot)
        except (OSError, RuntimeError) as error:  # e.g. a tiny /dev/shm in a bare container
            LOG.warning("no shared memory for checkpoints (%s): writing from a thread", error)
            self._abandon_writer()
            snapshot = copy_to_cpu(dict(state), self._staging)
        self._staging = snapshot
        return snapshot

    def _start_writer(self) -> None:
        if self._conn is not None or not self._use_process:
            return
        context = torch.multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(
            target=_writer_process_main,
            args=(child, str(self.directory), self.keep, self.write_delay_s),
            name="checkpoint-writer",
            daemon=True,
        )
        # Only a started writer is remembered: if start() fails, the thread fallback takes
        # over and close() must not wait on a process that never ran.
        try:
            process.start()
        except (OSError, RuntimeError) as error:
            LOG.warning("checkpoint writer process unavailable (%s): using a thread", error)
            self._use_process = False
            parent.close()
            return
        finally:
            child.close()
        self._conn, self._process = parent, process

    def _abandon_writer(self) -> None:
        self._use_process = False
        self._ready = False
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._process.join(timeout=60)
            self._conn = self._process = None

    def in_flight(self) -> bool:
        if self._pending:
            return not self._conn.poll()
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        if self._pending:
            self._pending = False
            try:
                status, payload = self._conn.recv()
            except EOFError:
                status, payload = "error", "the checkpoint writer process died"
            if status == "ok":
                self._committed(CheckpointEntry.from_json(payload))
            else:
                self._error = CheckpointError(payload)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(f"checkpoint write failed: {error}") from error

    def close(self) -> None:
        """Wait for the write in flight, then let the writer process exit."""
        try:
            self.wait()
        finally:
            if self._conn is not None:
                self._conn.close()
                self._process.join(timeout=60)
                self._conn = self._process = None

    def _committed(self, entry: CheckpointEntry) -> None:
        self.last_committed = entry
        LOG.info("checkpoint committed: %s (%d bytes)", self.directory / entry.file, entry.size)

    def _commit_in_thread(self, state: dict[str, Any], epochs: int, step: int) -> None:
        try:
            self._committed(self.commit(state, epochs, step))
        except BaseException as error:
            self._error = error

    def commit(self, state: dict[str, Any], epochs: int, step: int) -> CheckpointEntry:
        """Write, verify-able and atomically: file, then manifest (the commit), then snapshot
        link, then retention. Safe to kill at any point."""
        name = checkpoint_name(epochs, step)
        target = self.directory / name
        writer_holder: list[_HashingWriter] = []

        def write(raw: Any) -> None:
            writer = _HashingWriter(raw)
            writer_holder.append(writer)
            torch.save(state, writer)

        _write_bytes_atomically(target, write, self.write_delay_s)
        writer = writer_holder[0]
        entry = CheckpointEntry(
            file=name,
            sha256=writer.digest.hexdigest(),
            size=writer.size,
            epochs_completed=epochs,
            step_in_epoch=step,
            world_size=int(state["WORLD_SIZE"]),
            fingerprint=str(state["CONFIG_FINGERPRINT"]),
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
    state = found.state
    return {
        "path": str(found.path),
        "epochs_completed": int(state["EPOCHS_RUN"]),
        "step_in_epoch": found.entry.step_in_epoch,
        "world_size": int(state["WORLD_SIZE"]),
        "model_sha256": model_sha256(state["MODEL_STATE"]),
        "sha256": found.entry.sha256,
        "size": found.entry.size,
        "config": state.get("CONFIG"),
        "config_fingerprint": state["CONFIG_FINGERPRINT"],
        "format_version": int(state["FORMAT_VERSION"]),
        "skipped": list(found.skipped),
        "origin": state.get("ORIGIN"),
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
