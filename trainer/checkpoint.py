"""The checkpoint store: what a run keeps, how it gets there safely and how it is read back.
Atomic commit, a manifest with checksums, keep-K retention, verification with fallback to the
previous checkpoint, setting corrupt files aside, and the inspection command. No process or
thread of its own: the trainer's writer (``trainer.async_writer``) decides *when and where* a
commit runs, the resume decision (``trainer.resume``) *which* checkpoint to continue from; this
module is *what* a commit and a read are, so each stays testable without the others. Where the
bytes go is the run's storage (``trainer.storage``: a directory, or another backend chosen by
the root's scheme), through one interface; the protocol below is the same on every backend.

What a run's root holds::

    checkpoint-e000025-s000000.pt   one object per checkpoint (epochs completed, step in epoch)
    checkpoint-e000025-s000000.dcp/ or, with --parallelism fsdp, a sharded one (trainer.sharded)
    manifest.json                   committed checkpoints, oldest first, with sha256 and size
    snapshot.pt                     the latest committed checkpoint (hard link, or copy)
    metrics.jsonl                   one JSON line per epoch (written by trainer.metrics)
    rejected/                       checkpoints a resume found corrupt, set aside (never deleted)

The manifest is the commit point: objects first, then the manifest naming them with their
sha256, so a checkpoint that is not listed there (a write that was killed) is never used. A
sharded checkpoint is a folder of files (``NAME/FILE``), written by every rank for its shards,
then listed with every file's sha256 and size once every rank's files are written
(:meth:`CheckpointStore.commit_sharded`); it has no ``snapshot.pt`` (``--consolidate`` makes
one file of it). On a root that is a directory here the ranks write into a temporary directory,
renamed whole before it is listed; on any other storage (an object store has no rename) they
upload straight under the checkpoint's name (``trainer.sharded_transfer``), the manifest alone
committing it, and a reader downloads the files and checks each against its sha256 before
anything loads them. Run ``python -m trainer.checkpoint ROOT`` to see what a resume would use.
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
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint_schema import (
    FORMAT_VERSION,
    SHARDED_FORMAT_VERSION,
    CheckpointError,
    TrainingCheckpoint,
)
from trainer.durable_file import storages_aligned_for_direct_io
from trainer.sharded import (
    INDEX_NAME,
    META_NAME,
    MODEL_KEY,
    SHARDED_SUFFIX,
    hash_files,
    indexed_files,
    is_sharded,
    listing_sha256,
    whole_state,
)
from trainer.sharded_transfer import download, spooled
from trainer.storage import RunStorage, StorageRoot, locate, open_storage

MANIFEST_NAME = "manifest.json"
SNAPSHOT_NAME = "snapshot.pt"
# Test and debugging hook: seconds a commit pauses after the bytes are out and before they are
# committed (fsync + rename, or an upload's completion), so a kill can land while a write is in
# flight.
WRITE_DELAY_ENV = "TRAINER_CHECKPOINT_WRITE_DELAY"
# Test hook: once this many commits are done, every further commit stops at that same point until
# the process is killed, so a test kills a run with a write in flight however loaded the machine
# (a delay is a race a busy machine can lose).
HOLD_AFTER_ENV = "TRAINER_CHECKPOINT_HOLD_AFTER"
_HELD_S = 24 * 3600.0
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
    # A sharded checkpoint (``file`` is its directory): every file in it, {name: {sha256,
    # size}}; ``sha256`` is then :func:`trainer.sharded.listing_sha256` of it, ``size`` the
    # total. None for a whole-file checkpoint.
    files: dict[str, dict[str, Any]] | None = None

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


def checkpoint_name(epochs_completed: int, step_in_epoch: int, *, sharded: bool = False) -> str:
    suffix = SHARDED_SUFFIX if sharded else ".pt"
    return f"checkpoint-e{epochs_completed:06d}-s{step_in_epoch:06d}{suffix}"


def sharded_staging_name(name: str) -> str:
    """Where the ranks write sharded checkpoint ``name`` before it is committed: a name of the
    temporary files' shape (``trainer.durable_file.TEMPORARY_GLOB``), so a killed write's
    leftovers are removed as partial writes."""
    return f".{name}.tmp-shards"


def model_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """Equal exactly when names, dtypes, shapes and every bit of the weights are equal."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        # The numpy view is hashed in place: no copy, and hashlib releases the GIL meanwhile.
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def load_checkpoint(
    path: Path, *, mmap: bool = False, source: str | None = None
) -> TrainingCheckpoint:
    """A checkpoint file of this machine, unverified. ``mmap``: map the file instead of reading
    it; the tensors are backed by the page cache until the caller copies them into its model,
    so no second copy of the state is made. ``source``: how errors name it (default: path)."""
    # weights_only: a checkpoint holds tensors and plain containers only, so loading it never
    # runs code from the (shared, writable) volume.
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    return TrainingCheckpoint.from_state(state, source or str(path))


def _sha256_of(data: Any) -> str:
    digest = hashlib.sha256()
    with memoryview(data) as view:  # released on return, so a mapped file can be closed
        for start in range(0, len(view), _HASH_CHUNK):
            with view[start : start + _HASH_CHUNK] as chunk:
                digest.update(chunk)  # hashlib releases the GIL meanwhile
    return digest.hexdigest()


def _read_verified(
    path: Path, sha256: str | None, size: int | None, shown: str
) -> tuple[TrainingCheckpoint, str]:
    """Read ``path`` once; check size and sha256 over exactly the bytes that are deserialised.
    ``shown``: the object's location in errors (``path`` may be a downloaded copy).

    The file is memory-mapped: the hash (in a thread) faults its pages into the page cache,
    and ``torch.load(mmap=True)`` maps those same pages, so the volume is read once and the
    state is never held twice (raw bytes plus a deserialised copy: 2x the checkpoint in RAM,
    and a copy that costs as much as the read). Both see the same inode (checked: checkpoint
    files are only ever renamed into place, never rewritten). Returns the state and the sha256
    (useful when the caller had none to compare with)."""
    with path.open("rb") as handle:
        info = os.fstat(handle.fileno())
        if size is not None and info.st_size != size:
            raise CheckpointError(
                f"{shown} has {info.st_size} bytes, manifest says {size} (truncated?)"
            )
        if info.st_size == 0:
            raise CheckpointError(f"{shown} is empty")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            with contextlib.suppress(AttributeError, OSError):  # madvise: Linux, Python >= 3.8
                view.madvise(mmap.MADV_SEQUENTIAL)
            digest: list[str] = []
            hasher = threading.Thread(target=lambda: digest.append(_sha256_of(view)), name="sha256")
            hasher.start()
            loaded: TrainingCheckpoint | None = None
            problem: BaseException | None = None
            try:
                loaded = load_checkpoint(path, mmap=True, source=shown)
                same = path.stat()
                if (same.st_ino, same.st_dev) != (info.st_ino, info.st_dev):
                    problem = CheckpointError(f"{shown} was replaced while it was being read")
            except Exception as error:  # judged after the hash: a bad hash is the better diagnosis
                problem = error
            finally:
                hasher.join()
    if sha256 is not None and digest[0] != sha256:
        raise CheckpointError(f"{shown} fails its sha256 check (corrupted)")
    if isinstance(problem, CheckpointError):
        raise problem
    if problem is not None or loaded is None:
        raise CheckpointError(f"{shown} cannot be loaded: {problem}") from problem
    return loaded, digest[0]


@dataclass(frozen=True)
class CommitRecord:
    """A checkpoint the writers committed, with what the reports say about the write: its own
    seconds (an inline write's, or the writer process's or thread's, not the time it then
    waited to be collected) and the unix time of the commit."""

    entry: CheckpointEntry
    seconds: float
    time: float


@dataclass(frozen=True)
class Resumable:
    """The newest checkpoint that verified, read: what a resume continues from."""

    entry: CheckpointEntry
    location: str  # where it is, for messages and for the ranks that load it after rank 0
    checkpoint: TrainingCheckpoint
    skipped: tuple[str, ...]  # why newer checkpoints were passed over
    skipped_entries: tuple[CheckpointEntry, ...] = ()


class CheckpointStore:
    """One run's checkpoints: what is committed under its root and how a checkpoint gets in or
    out, whichever storage backend holds them.

    Writing: :meth:`commit` (object, manifest, snapshot, retention of ``keep``). Reading:
    :meth:`manifest`, :meth:`find_resumable` (newest verified, with fallback), :meth:`read_file`
    (one object, verified against the manifest when listed there), :meth:`verify` (sha256 and
    size only) and :meth:`load` (unverified), and the repairs a resume makes
    (:meth:`set_aside`, :meth:`remove_partial_writes`). ``root``: a path, a storage URL or an
    opened :class:`~trainer.storage.RunStorage`. Plain and picklable, so the writer process
    receives it whole; ``keep`` matters only to commits."""

    def __init__(
        self,
        root: StorageRoot,
        keep: int = 2,
        write_delay_s: float = 0.0,
        hold_after: int | None = None,
    ) -> None:
        if keep < 2:
            raise ValueError(f"keep must be >= 2 so a fallback exists, got {keep}")
        self.storage: RunStorage = open_storage(root)
        self.keep = keep
        self.write_delay_s = write_delay_s  # see WRITE_DELAY_ENV
        self.hold_after = hold_after  # see HOLD_AFTER_ENV
        self._commits = 0

    def commit_pause_s(self) -> float:
        """How long a write pauses once its bytes are out and before it is committed: the
        test hooks (``WRITE_DELAY_ENV``, ``HOLD_AFTER_ENV``); 0 in a real run."""
        if self.hold_after is not None and self._commits >= self.hold_after:
            LOG.warning("checkpoint commit held (%s=%d)", HOLD_AFTER_ENV, self.hold_after)
            return _HELD_S
        return self.write_delay_s

    def __repr__(self) -> str:
        return f"CheckpointStore({self.storage.location!r}, keep={self.keep})"

    # -- reading ------------------------------------------------------------------------------

    def manifest(self) -> list[CheckpointEntry]:
        """The committed checkpoints, oldest first (empty when nothing was ever committed)."""
        shown = self.storage.location_of(MANIFEST_NAME)
        try:
            raw = json.loads(self.storage.read_bytes(MANIFEST_NAME))
            return [CheckpointEntry.from_json(item) for item in raw["checkpoints"]]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"manifest {shown} is unreadable: {error}") from error

    def find_resumable(self) -> Resumable | None:
        """Newest checkpoint that verifies; None when nothing was ever committed. Raises
        CheckpointError when checkpoints exist but none is usable, rather than silently
        starting over and later deleting them."""
        entries = self.manifest()
        skipped: list[str] = []
        bad: list[CheckpointEntry] = []
        for entry in reversed(entries):
            try:
                checkpoint, _ = self._read_entry(entry)
            except CheckpointError as error:
                skipped.append(str(error))
                bad.append(entry)
                LOG.warning("checkpoint unusable, falling back to the previous one: %s", error)
                continue
            location = self.storage.location_of(entry.file)
            return Resumable(entry, location, checkpoint, tuple(skipped), tuple(bad))
        if entries:
            raise CheckpointError(
                f"no usable checkpoint in {self.storage.location}: " + "; ".join(skipped) + ". "
                "Move the directory aside (or pass another --checkpoint-dir) to start from "
                "scratch."
            )
        return None

    def read_file(self, name: str) -> tuple[TrainingCheckpoint, str]:
        """Object ``name`` read once and verified: against its manifest entry when it is listed
        (a committed checkpoint), else only loadable (a file copied here by hand). Returns the
        state and its sha256."""
        listed = {entry.file: entry for entry in self.manifest()}
        entry = listed.get(name)
        if entry is not None:
            return self._read_entry(entry)
        if is_sharded(name):
            return self._read_sharded(name, None), ""
        return self._read(name, None, None)

    def load(self, name: str) -> TrainingCheckpoint:
        """Object ``name`` mapped, unverified: for the ranks that follow rank 0, which verified
        it, and for naming what differs in a refusal. A sharded checkpoint: its ``trainer.pt``
        (the DCP files are loaded by every rank from ``sharded_at``)."""
        if is_sharded(name):
            return self._read_sharded(name, None)
        shown = self.storage.location_of(name)
        with self._reading(name) as path:
            return load_checkpoint(path, mmap=True, source=shown)

    def verify(self, entry: CheckpointEntry) -> None:
        """Raise CheckpointError unless the object of ``entry`` has its size and sha256 (not
        deserialised: a copy's check); for a sharded one, every file of it."""
        if entry.files is not None:
            self._verify_files(entry.file, entry.files)
            return
        shown = self.storage.location_of(entry.file)
        with self._reading(entry.file) as path, path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        if (size, digest) != (entry.size, entry.sha256):
            raise CheckpointError(
                f"{shown} does not match its manifest entry: {size} bytes with sha256 {digest}, "
                f"listed as {entry.size} bytes with sha256 {entry.sha256}"
            )

    def _read_entry(self, entry: CheckpointEntry) -> tuple[TrainingCheckpoint, str]:
        if entry.files is not None:
            return self._read_sharded(entry.file, entry.files), entry.sha256
        return self._read(entry.file, entry.sha256, entry.size)

    def _sharded_directory(self, name: str) -> Path | None:
        """Sharded checkpoint ``name`` as a directory here; None on storage that is not one."""
        root = self.storage.local_directory()
        if root is None:
            return None
        if not (root / name).is_dir():
            raise CheckpointError(f"{self.storage.location_of(name)} is missing")
        return root / name

    def _hash_files(
        self, name: str, files: Iterable[str], into: Path | None = None
    ) -> dict[str, dict[str, Any]]:
        """``{FILE: {sha256, size}}`` of the files of sharded checkpoint ``name``: read in
        place on a directory, else downloaded (kept in ``into`` when given: what DCP then
        reads is exactly what was hashed). A missing or unreadable one is a CheckpointError."""
        directory = self._sharded_directory(name)
        try:
            if directory is not None:
                return hash_files(directory, files)
            return download(self.storage, name, files, into)
        except FileNotFoundError as error:
            raise CheckpointError(f"{error.filename} is missing (a shard of {name})") from None
        except OSError as error:
            raise CheckpointError(
                f"{self.storage.location_of(name)} cannot be read: {error}"
            ) from error

    def _verify_files(
        self, name: str, files: Mapping[str, Mapping[str, Any]], into: Path | None = None
    ) -> None:
        """Every file of sharded checkpoint ``name`` has the size and sha256 it was listed
        with (CheckpointError naming the first that does not). ``into``: see _hash_files."""
        found = self._hash_files(name, files, into)
        for file, listed in sorted(files.items()):
            have = found[file]
            shown = self.storage.location_of(f"{name}/{file}")
            if have["size"] != listed["size"]:
                raise CheckpointError(
                    f"{shown} has {have['size']} bytes, manifest says {listed['size']} (truncated?)"
                )
            if have["sha256"] != listed["sha256"]:
                raise CheckpointError(f"{shown} fails its sha256 check (corrupted)")

    def _read_sharded(
        self, name: str, files: Mapping[str, Mapping[str, Any]] | None
    ) -> TrainingCheckpoint:
        """Sharded checkpoint ``name``'s training state (all but the tensors), its files
        verified first when ``files`` lists them. ``sharded_at`` is where it is
        (:func:`shards_on_disk` gives its files to DCP)."""
        if files is not None:
            self._verify_files(name, files)
        self._sharded_directory(name)  # a missing directory is named as the checkpoint
        shown = self.storage.location_of(f"{name}/{META_NAME}")
        try:
            with self.storage.local_file(f"{name}/{META_NAME}") as path:
                meta = load_checkpoint(path, source=shown)
        except FileNotFoundError:
            raise CheckpointError(f"{shown} is missing") from None
        except CheckpointError:
            raise
        except Exception as error:
            raise CheckpointError(f"{shown} cannot be loaded: {error}") from error
        return replace(meta, sharded_at=self.storage.location_of(name))

    @contextlib.contextmanager
    def local_shards(self, name: str) -> Iterator[Path]:
        """Sharded checkpoint ``name`` as a directory of this machine, for DCP to read: the
        checkpoint's own on a filesystem root; else its files downloaded into a spool directory
        (removed after), each checked first against the manifest when ``name`` is listed there
        (every rank checks what it loads), or, unlisted (a checkpoint copied by hand), the
        files its DCP index names."""
        directory = self._sharded_directory(name)
        if directory is not None:
            yield directory
            return
        listed = {entry.file: entry.files for entry in self.manifest()}.get(name)
        with spooled("shards") as into:
            if listed is not None:
                self._verify_files(name, listed, into)
            else:
                self._hash_files(name, [INDEX_NAME], into)
                self._hash_files(name, indexed_files(into) - {INDEX_NAME}, into)
            yield into

    def _read(
        self, name: str, sha256: str | None, size: int | None
    ) -> tuple[TrainingCheckpoint, str]:
        with self._reading(name) as path:
            return _read_verified(path, sha256, size, self.storage.location_of(name))

    @contextlib.contextmanager
    def _reading(self, name: str) -> Any:
        """The object as a local file; a missing or unreadable one is a CheckpointError."""
        shown = self.storage.location_of(name)
        try:
            with self.storage.local_file(name) as path:
                yield path
        except FileNotFoundError:
            raise CheckpointError(f"{shown} is missing") from None
        except OSError as error:
            raise CheckpointError(f"{shown} cannot be read: {error}") from error

    # -- repairs a resume makes ---------------------------------------------------------------

    def set_aside(self, found: Resumable) -> list[str]:
        """After a fallback: drop the entries that failed verification from the manifest and
        move their objects to ROOT/rejected/ (kept for a post-mortem, never deleted by us).
        Without this, retention counts the corrupt entries as kept checkpoints and may delete
        the good one the run resumed from. The manifest is rewritten first (the commit point),
        so a kill between the two steps leaves at worst a stray object, never a manifest
        naming a moved one. Returns the names of the objects moved."""
        if not found.skipped_entries:
            return []
        bad = {entry.file: entry for entry in found.skipped_entries}
        self._write_manifest([e for e in self.manifest() if e.file not in bad])
        self._point_snapshot_at(found.entry.file)
        return [name for name in sorted(bad) if self._move_aside(bad[name])]

    def remove_partial_writes(self) -> None:
        """What a killed write left is garbage by construction (never committed)."""
        self.storage.remove_partial_writes()

    # -- writing ------------------------------------------------------------------------------

    def commit(
        self, state: Mapping[str, Any], epochs: int, step: int, *, direct_io: bool = False
    ) -> CheckpointEntry:
        """Write, verify-able and atomically: the object, then the manifest (the commit), then
        the snapshot, then retention. Safe to kill at any point. ``state`` is
        :meth:`TrainingCheckpoint.to_state`'s dictionary (or a staged copy of it).
        ``direct_io``: the background writer's write, kept off the page cache where the medium
        allows (see ``trainer.durable_file.ChecksummedFile``)."""
        checkpoint = TrainingCheckpoint.from_state(state, "the state to commit")
        name = checkpoint_name(epochs, step)
        with storages_aligned_for_direct_io() if direct_io else contextlib.nullcontext():
            written = self.storage.write(
                name,
                lambda file: torch.save(state, file),  # type: ignore[arg-type]
                direct=direct_io,
                delay_s=self.commit_pause_s(),
            )
        entry = CheckpointEntry(
            file=name,
            sha256=written.sha256,
            size=written.size,
            epochs_completed=epochs,
            step_in_epoch=step,
            world_size=checkpoint.world_size,
            fingerprint=checkpoint.config_fingerprint,
            global_batch=checkpoint.run_global_batch(),
        )
        return self._record(entry)

    def sharded_target(self, name: str) -> str:
        """Where the ranks write sharded checkpoint ``name``: a temporary directory, renamed
        at the commit, on a root that is a directory here; the name itself elsewhere (no
        rename there: the manifest alone commits it)."""
        return sharded_staging_name(name) if self.storage.local_directory() is not None else name

    def prepare_sharded(self, name: str) -> str:
        """Rank 0, before any rank writes sharded checkpoint ``name``: clear what an earlier
        attempt left where they will write (and, where that is the name itself, unlist a
        committed checkpoint of that name first, so the manifest never names one being
        overwritten). Returns :meth:`sharded_target`."""
        target = self.sharded_target(name)
        if target == name:
            self._clear_name(name)
        else:
            self.storage.delete(target)
        return target

    def commit_sharded(
        self,
        staging: str,
        state: Mapping[str, Any],
        shards: Mapping[str, Mapping[str, Any]],
        epochs: int,
        step: int,
    ) -> CheckpointEntry:
        """Commit the sharded checkpoint the ranks wrote into ``staging``
        (:meth:`sharded_target`; rank 0, once every rank's files are written and ``shards``
        holds their sha256 and size): ``trainer.pt`` from ``state`` (the training state without
        its tensors), on a directory any file no rank hashed (DCP's index) and the rename to
        its name, then the manifest (the commit point) and retention, as :meth:`commit`. Safe to
        kill at any point: until the manifest names it, what was written is never read."""
        checkpoint = TrainingCheckpoint.from_state(state, "the state to commit")
        name = checkpoint_name(epochs, step, sharded=True)
        written = self.storage.write(
            f"{staging}/{META_NAME}",
            lambda file: torch.save(dict(state), file),  # type: ignore[arg-type]
        )
        files = {file: dict(listed) for file, listed in shards.items()}
        files[META_NAME] = {"sha256": written.sha256, "size": written.size}
        directory = self.storage.local_directory()
        if directory is not None:
            present = {path.name for path in (directory / staging).iterdir()}
            files.update(hash_files(directory / staging, present - set(files)))
            if missing := sorted(set(files) - present):
                raise CheckpointError(f"{name}: {', '.join(missing)} listed but not written")
        elif INDEX_NAME not in files:
            raise CheckpointError(f"{name}: {INDEX_NAME} (DCP's index) was not written")
        if (pause_s := self.commit_pause_s()) > 0:
            time.sleep(pause_s)
        if staging != name:
            # A directory can only be renamed onto an absent name: one of that name goes first.
            self._clear_name(name)
            self.storage.move(staging, name)
        entry = CheckpointEntry(
            file=name,
            sha256=listing_sha256(files),
            size=sum(int(item["size"]) for item in files.values()),
            epochs_completed=epochs,
            step_in_epoch=step,
            world_size=checkpoint.world_size,
            fingerprint=checkpoint.config_fingerprint,
            format_version=SHARDED_FORMAT_VERSION,
            global_batch=checkpoint.run_global_batch(),
            files=files,
        )
        return self._record(entry)

    def _record(self, entry: CheckpointEntry) -> CheckpointEntry:
        """List ``entry`` (written) in the manifest, the commit point, then move the snapshot
        and delete what retention drops."""
        previous = [item for item in self.manifest() if item.file != entry.file]
        kept = [*previous, entry][-self.keep :]
        self._write_manifest(kept)  # the commit point
        self._commits += 1
        self._point_snapshot_at(entry.file)
        kept_files = {item.file for item in kept}
        for old in previous:
            if old.file not in kept_files:
                self._delete_checkpoint(old)
        return entry

    def _clear_name(self, name: str) -> None:
        """Make ``name`` free for a checkpoint about to be written there: a committed one of
        that name is unlisted first (so the manifest never names one being overwritten), then
        what is there goes (an earlier attempt that was never committed, or that one)."""
        listed = self.manifest()
        old = [entry for entry in listed if entry.file == name]
        if old:
            self._write_manifest([entry for entry in listed if entry.file != name])
        for entry in old:
            self._delete_checkpoint(entry)
        self.storage.delete(name)

    def _delete_checkpoint(self, entry: CheckpointEntry) -> None:
        """A checkpoint's object, or every file of a sharded one: its directory goes whole
        where folders are real, each listed object where they are only names."""
        self.storage.delete(entry.file)
        if self.storage.local_directory() is None:
            for file in entry.files or ():
                self.storage.delete(f"{entry.file}/{file}")

    def _move_aside(self, entry: CheckpointEntry) -> bool:
        """A checkpoint's object(s) to ``rejected/`` (see :meth:`_delete_checkpoint`); False
        when nothing of it was there."""
        to = f"{REJECTED_DIR}/{entry.file}"
        if self.storage.move(entry.file, to):
            return True
        moved = [
            self.storage.move(f"{entry.file}/{file}", f"{to}/{file}") for file in entry.files or ()
        ]
        return any(moved)

    def _point_snapshot_at(self, name: str) -> None:
        """``snapshot.pt`` is the newest committed checkpoint, when that is one file; a sharded
        one has none (a stale snapshot would be an older checkpoint posing as the newest)."""
        if is_sharded(name):
            self.storage.delete(SNAPSHOT_NAME)
        else:
            self.storage.copy(name, SNAPSHOT_NAME)

    def _write_manifest(self, entries: Sequence[CheckpointEntry]) -> None:
        payload = {
            "format_version": FORMAT_VERSION,
            "checkpoints": [asdict(entry) for entry in entries],
        }
        encoded = (json.dumps(payload, indent=2) + "\n").encode()
        self.storage.write(MANIFEST_NAME, lambda file: file.write(encoded))


def locate_checkpoint(source: StorageRoot) -> tuple[RunStorage, str | None] | None:
    """What ``--init-from`` names: a run's root (name None), one checkpoint of a root (a file,
    or a sharded checkpoint's directory), or nothing there (None)."""
    located = locate(source)
    if located is not None and located[1] is None and is_sharded(located[0].location.rstrip("/")):
        return located[0].parent()
    return located


def load_at(location: str) -> TrainingCheckpoint:
    """The checkpoint object at ``location`` (a root's location of it), mapped, unverified."""
    storage, name = open_storage(location).parent()
    return CheckpointStore(storage).load(name)


@contextlib.contextmanager
def shards_on_disk(location: str) -> Iterator[Path]:
    """The sharded checkpoint at ``location`` (a ``TrainingCheckpoint.sharded_at``) as a
    directory of this machine for DCP, for the duration of the context (see
    :meth:`CheckpointStore.local_shards`)."""
    storage, name = open_storage(location).parent()
    with CheckpointStore(storage).local_shards(name) as directory:
        yield directory


def describe(root: StorageRoot) -> dict[str, Any]:
    """What ``python -m trainer.checkpoint ROOT`` prints."""
    store = _opened(root)
    found = store.find_resumable()
    if found is None:
        raise CheckpointError(
            f"no committed checkpoint in {store.storage.location} (no {MANIFEST_NAME})"
        )
    checkpoint = found.checkpoint
    if checkpoint.sharded_at is not None:
        with shards_on_disk(checkpoint.sharded_at) as directory:
            model_state = whole_state(directory)[MODEL_KEY]
    else:
        model_state = checkpoint.model_state
    return {
        "path": found.location,
        "epochs_completed": checkpoint.epochs_run,
        "step_in_epoch": found.entry.step_in_epoch,
        "epoch_position": checkpoint.epoch_position,
        "global_batch": checkpoint.run_global_batch(),
        "world_size": checkpoint.world_size,
        "layout": "sharded" if found.entry.files is not None else "whole",
        "files": len(found.entry.files) if found.entry.files is not None else 1,
        "model_sha256": model_sha256(model_state),
        "sha256": found.entry.sha256,
        "size": found.entry.size,
        "config": checkpoint.config,
        "config_fingerprint": checkpoint.config_fingerprint,
        "format_version": checkpoint.format_version,
        "skipped": list(found.skipped),
        "origin": checkpoint.origin,
    }


def _opened(root: StorageRoot) -> CheckpointStore:
    storage = open_storage(root)
    problem = storage.missing()
    if problem is not None:
        raise CheckpointError(f"checkpoint directory {storage.location} {problem}")
    return CheckpointStore(storage)


def verify_all(root: StorageRoot) -> list[str]:
    """Check every committed checkpoint of ``root`` against the manifest (every file of a
    sharded one); one line per checkpoint, CheckpointError naming the first that fails."""
    store = _opened(root)
    entries = store.manifest()
    if not entries:
        raise CheckpointError(f"no committed checkpoint in {store.storage.location}")
    said = []
    for entry in entries:
        store.verify(entry)
        files = len(entry.files) if entry.files is not None else 1
        said.append(f"{store.storage.location_of(entry.file)}: {files} file(s) verified")
    return said


def consolidate(root: StorageRoot, out: Path) -> dict[str, Any]:
    """Write the checkpoint a resume from ``root`` would use as one whole file at ``out``: the
    model weights whole (``torch.load(out)["MODEL_STATE"]``, for inference or ``--init-from``)
    with the training state beside them; a sharded checkpoint's optimizer state is left out
    (it is keyed by parameter name, not in ``Optimizer.state_dict``'s form). Returns what
    ``describe`` says of it."""
    info = describe(root)
    found = _opened(root).find_resumable()
    assert found is not None
    checkpoint = found.checkpoint
    if checkpoint.sharded_at is not None:
        with shards_on_disk(checkpoint.sharded_at) as directory:
            model_state = whole_state(directory)[MODEL_KEY]
        checkpoint = replace(
            checkpoint,
            model_state=model_state,
            optimizer_state=None,
            format_version=FORMAT_VERSION,
            sharded_at=None,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint.to_state(), out)
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.checkpoint",
        description="Print, as JSON, the checkpoint a resume from ROOT would use (whole-file "
        "or sharded).",
    )
    parser.add_argument(
        "root",
        metavar="ROOT",
        help="a run's checkpoint directory, or the URL of its root on another storage backend",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="also verify every committed checkpoint, every file of a sharded one, against the "
        "manifest",
    )
    parser.add_argument(
        "--consolidate",
        metavar="FILE",
        type=Path,
        help="also write that checkpoint as one whole file (its weights whole: for inference, "
        "or --init-from)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="warning: %(message)s")
    try:
        if args.all:
            for line in verify_all(args.root):
                print(line, file=sys.stderr)
        if args.consolidate is not None:
            info = consolidate(args.root, args.consolidate)
            print(f"consolidated {info['path']} into {args.consolidate}", file=sys.stderr)
        else:
            info = describe(args.root)
    except (CheckpointError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(info, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
