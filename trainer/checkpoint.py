"""The checkpoint store: what is on disk, how it gets there safely and how it is read back.
Atomic commit, a manifest with checksums, keep-K retention, verification with fallback to the
previous checkpoint, setting corrupt files aside, and the inspection command. No process or
thread of its own: the trainer's writer (``trainer.async_writer``) decides *when and where* a
commit runs, the resume decision (``trainer.resume``) *which* checkpoint to continue from; this
module is *what* a commit and a read are, so each stays testable without the others. How a
single file reaches the disk durably (temporary file, O_DIRECT, fsync, rename) is
``trainer.durable_file``.

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
import hashlib
import json
import logging
import mmap
import os
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint_schema import FORMAT_VERSION, CheckpointError, TrainingCheckpoint
from trainer.durable_file import (
    TEMPORARY_GLOB,
    fsync_directory,
    storages_aligned_for_direct_io,
    temporary_name,
    write_atomically,
)

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
    """One committed checkpoint in the manifest: what a resume can judge without the file."""

    file: str
    sha256: str
    size: int
    epochs_completed: int
    step_in_epoch: int
    world_size: int
    fingerprint: str
    format_version: int = FORMAT_VERSION
    global_batch: int | None = None  # None in manifests of version 1 checkpoints

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CheckpointEntry:
        """Keys with a default may be missing (manifests written before they existed)."""
        return cls(
            **{
                name: raw[name]
                for name, spec in cls.__dataclass_fields__.items()
                if name in raw or spec.default is MISSING
            }
        )


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


def _read_verified(
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
    """The newest checkpoint that verified, read: what a resume continues from."""

    entry: CheckpointEntry
    path: Path
    checkpoint: TrainingCheckpoint
    skipped: tuple[str, ...]  # why newer checkpoints were passed over
    skipped_entries: tuple[CheckpointEntry, ...] = ()


@dataclass(frozen=True)
class CheckpointStore:
    """One checkpoint directory: what is committed there and how a checkpoint gets in or out.

    Writing: :meth:`commit` (file, manifest, snapshot link, retention of ``keep``). Reading:
    :meth:`manifest`, :meth:`find_resumable` (newest verified, with fallback), :meth:`read_file`
    (one file, verified against the manifest when listed there), and the repairs a resume
    makes (:meth:`set_aside`, :meth:`remove_stale_temporaries`). Plain and picklable, so the
    writer process receives it whole; ``keep`` matters only to commits."""

    directory: Path
    keep: int = 2
    write_delay_s: float = 0.0  # see WRITE_DELAY_ENV

    def __post_init__(self) -> None:
        if self.keep < 2:
            raise ValueError(f"keep must be >= 2 so a fallback exists, got {self.keep}")

    # -- reading ------------------------------------------------------------------------------

    def manifest(self) -> list[CheckpointEntry]:
        """The committed checkpoints, oldest first (empty when nothing was ever committed)."""
        path = self.directory / MANIFEST_NAME
        if not path.exists():
            return []
        try:
            raw = json.loads(path.read_text())
            return [CheckpointEntry.from_json(item) for item in raw["checkpoints"]]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"manifest {path} is unreadable: {error}") from error

    def find_resumable(self) -> Resumable | None:
        """Newest checkpoint that verifies; None when nothing was ever committed. Raises
        CheckpointError when checkpoints exist but none is usable, rather than silently
        starting over and later deleting them."""
        entries = self.manifest()
        skipped: list[str] = []
        bad: list[CheckpointEntry] = []
        for entry in reversed(entries):
            path = self.directory / entry.file
            try:
                checkpoint, _ = _read_verified(path, entry.sha256, entry.size)
            except CheckpointError as error:
                skipped.append(str(error))
                bad.append(entry)
                LOG.warning("checkpoint unusable, falling back to the previous one: %s", error)
                continue
            return Resumable(entry, path, checkpoint, tuple(skipped), tuple(bad))
        if entries:
            raise CheckpointError(
                f"no usable checkpoint in {self.directory}: " + "; ".join(skipped) + ". Move "
                "the directory aside (or pass another --checkpoint-dir) to start from scratch."
            )
        return None

    def read_file(self, name: str) -> tuple[TrainingCheckpoint, str]:
        """DIR/``name`` read once and verified: against its manifest entry when it is listed
        (a committed checkpoint), else only loadable (a file copied here by hand). Returns the
        state and its sha256."""
        listed = {entry.file: entry for entry in self.manifest()}
        entry = listed.get(name)
        sha256, size = (entry.sha256, entry.size) if entry is not None else (None, None)
        return _read_verified(self.directory / name, sha256, size)

    # -- repairs a resume makes ---------------------------------------------------------------

    def set_aside(self, found: Resumable) -> list[Path]:
        """After a fallback: drop the entries that failed verification from the manifest and
        move their files to DIR/rejected/ (kept for a post-mortem, never deleted by us).
        Without this, retention counts the corrupt entries as kept checkpoints and may delete
        the good one the run resumed from. The manifest is rewritten first (the commit point),
        so a kill between the two steps leaves at worst a stray file in DIR, never a manifest
        naming a moved file."""
        if not found.skipped_entries:
            return []
        bad = {entry.file for entry in found.skipped_entries}
        self._write_manifest([e for e in self.manifest() if e.file not in bad])
        self._point_snapshot_at(found.path)
        rejected = self.directory / REJECTED_DIR
        rejected.mkdir(exist_ok=True)
        moved: list[Path] = []
        for name in sorted(bad):
            source = self.directory / name
            if source.exists():
                target = rejected / name
                source.replace(target)
                moved.append(target)
        fsync_directory(self.directory)
        return moved

    def remove_stale_temporaries(self) -> None:
        """Temp files left by a killed write are garbage by construction (never committed)."""
        for stale in self.directory.glob(TEMPORARY_GLOB):
            with contextlib.suppress(OSError):
                stale.unlink()

    # -- writing ------------------------------------------------------------------------------

    def commit(
        self, state: Mapping[str, Any], epochs: int, step: int, *, direct_io: bool = False
    ) -> CheckpointEntry:
        """Write, verify-able and atomically: file, then manifest (the commit), then snapshot
        link, then retention. Safe to kill at any point. ``state`` is
        :meth:`TrainingCheckpoint.to_state`'s dictionary (or a staged copy of it).
        ``direct_io``: write the file past the page cache (see ``ChecksummedFile``)."""
        checkpoint = TrainingCheckpoint.from_state(state, "the state to commit")
        name = checkpoint_name(epochs, step)
        target = self.directory / name
        with storages_aligned_for_direct_io() if direct_io else contextlib.nullcontext():
            written = write_atomically(
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
            global_batch=checkpoint.run_global_batch(),
        )
        previous = [item for item in self.manifest() if item.file != name]
        kept = [*previous, entry][-self.keep :]
        self._write_manifest(kept)  # the commit point
        self._point_snapshot_at(target)
        kept_files = {item.file for item in kept}
        for old in previous:
            if old.file not in kept_files:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / old.file).unlink()
        return entry

    def _write_manifest(self, entries: Sequence[CheckpointEntry]) -> None:
        payload = {
            "format_version": FORMAT_VERSION,
            "checkpoints": [asdict(entry) for entry in entries],
        }
        encoded = (json.dumps(payload, indent=2) + "\n").encode()
        write_atomically(self.directory / MANIFEST_NAME, lambda file: file.write(encoded))

    def _point_snapshot_at(self, target: Path) -> None:
        """Keep DIR/snapshot.pt (what the tutorial reads) equal to the newest checkpoint. A
        hard link costs no I/O; filesystems without links get an atomic copy instead."""
        snapshot = self.directory / SNAPSHOT_NAME
        temporary = temporary_name(snapshot)
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        try:
            os.link(target, temporary)
        except OSError:
            shutil.copyfile(target, temporary)
            with temporary.open("rb+") as handle:
                os.fsync(handle.fileno())
        temporary.replace(snapshot)
        fsync_directory(self.directory)


def describe(directory: Path) -> dict[str, Any]:
    """What ``python -m trainer.checkpoint DIR`` prints."""
    if not directory.exists():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory")
    found = CheckpointStore(directory).find_resumable()
    if found is None:
        raise CheckpointError(f"no committed checkpoint in {directory} (no {MANIFEST_NAME})")
    checkpoint = found.checkpoint
    return {
        "path": str(found.path),
        "epochs_completed": checkpoint.epochs_run,
        "step_in_epoch": found.entry.step_in_epoch,
        "epoch_position": checkpoint.epoch_position,
        "global_batch": checkpoint.run_global_batch(),
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
