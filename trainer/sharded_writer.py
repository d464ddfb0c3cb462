"""When and where a sharded checkpoint is written (``--parallelism fsdp``): by every rank, its
own shards, in the background, committed by rank 0 once all of them are out, on whichever
storage holds the run.

A save (collective) copies this rank's shards of the model and optimizer state into a staging
copy (DCP's own stager: reused buffers, pinned memory on CUDA) and hands it to a writer thread,
so the loop waits only for that copy, as the DDP path's writer process does. The thread writes
the shards with torch.distributed.checkpoint where the store says
(``CheckpointStore.sharded_target``): on a root that is a directory here, straight into the
checkpoint's temporary directory, then hashes the files it wrote; on any other storage, into a
private spool directory of this machine, then uploads them through the run's storage, which
hashes them on their way out (``trainer.sharded_transfer``). Every rank's hashes are gathered to
rank 0, which commits through the store (``CheckpointStore.commit_sharded``: rename where there
is one, manifest, retention). A rank whose hashing or upload failed says so in the gather, so
the others never wait for it and nothing is committed. DCP's and our collectives run on a
process group of their own (gloo), so a write in flight never interleaves with the training
loop's collectives. At most one save is in flight; ``wait`` blocks until it is committed (the
next save, a stop, the end of training) and raises a failure of the background write
(``trainer.write_failure``). A final save is written in the caller's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from trainer.checkpoint import (
    CheckpointEntry,
    CheckpointError,
    CheckpointStore,
    CommitRecord,
    checkpoint_name,
)
from trainer.distributed import DistContext
from trainer.sharded import hash_files
from trainer.sharded_transfer import spooled, upload
from trainer.write_failure import WriteFailure

LOG = logging.getLogger("trainer")


class ShardedWriter:
    """One rank's side of the run's sharded checkpoints. Construct it on every rank (it creates
    a process group, a collective)."""

    def __init__(self, store: CheckpointStore, ctx: DistContext, *, background: bool = True):
        self.store = store
        self.root = store.storage.local_directory()  # None: the shards are uploaded
        self.ctx = ctx
        self.background = background
        self._group = dist.new_group(backend="gloo")
        cuda = ctx.device.type == "cuda"
        self._stager = DefaultStager(
            StagingOptions(
                use_pinned_memory=cuda,
                use_shared_memory=False,
                use_async_staging=False,
                use_non_blocking_copy=cuda,
            )
        )
        self._thread: threading.Thread | None = None
        self._failure = WriteFailure()
        self.last_committed: CheckpointEntry | None = None  # rank 0 only
        self._new_commits: list[CommitRecord] = []  # rank 0's, until take_commits
        self.last_mode: str | None = None

    def save(
        self,
        state: Mapping[str, Any],
        meta: Mapping[str, Any] | None,
        epochs_completed: int,
        step_in_epoch: int,
        *,
        final: bool,
    ) -> None:
        """Collective. ``state``: this rank's shards (``trainer.sharded.training_state``);
        ``meta``: the rest of the training state, on rank 0 (None elsewhere)."""
        self.wait()  # the previous save is committed and the staging copy free again
        name = checkpoint_name(epochs_completed, step_in_epoch, sharded=True)
        target = self.store.sharded_target(name)
        if self.ctx.is_main:
            # What a failed attempt left; no rank writes before rank 0 joins DCP's planning.
            self.store.prepare_sharded(name)
        args = (meta, target, epochs_completed, step_in_epoch, time.perf_counter())
        if final or not self.background:
            self._write_and_commit(dict(state), *args)
            self.last_mode = "inline"
            return
        staged = self._stager.stage(dict(state))
        self._thread = threading.Thread(
            target=self._failure.run,
            args=(partial(self._write_and_commit, staged, *args),),
            name="sharded-checkpoint-writer",
        )
        self._thread.start()
        self.last_mode = "background"

    def _write_and_commit(
        self,
        state: dict[str, Any],
        meta: Mapping[str, Any] | None,
        target: str,
        epochs: int,
        step: int,
        started: float,
    ) -> None:
        if self.root is not None:
            mine = self._write_in_place(state, self.root / target)
        else:
            mine = self._write_and_upload(state, target)
        gathered: list[Any] = [None] * self.ctx.world_size if self.ctx.is_main else []
        dist.gather_object(mine, gathered if self.ctx.is_main else None, 0, self._group)
        failed = [report["error"] for report in gathered if "error" in report]
        if "error" in mine or failed:
            raise CheckpointError("; ".join(failed) or mine["error"])
        if not self.ctx.is_main:
            return
        assert meta is not None, "rank 0 saves the training state beside the shards"
        shards: dict[str, Any] = {}
        for report in gathered:
            shards.update(report["files"])
        entry = self.store.commit_sharded(target, meta, shards, epochs, step)
        self.last_committed = entry
        self._new_commits.append(CommitRecord(entry, time.perf_counter() - started, time.time()))
        LOG.info(
            "checkpoint committed: %s (%d files, %d bytes)",
            self.store.storage.location_of(entry.file),
            len(entry.files or ()),
            entry.size,
        )

    def _write_in_place(self, state: dict[str, Any], directory: Path) -> dict[str, Any]:
        """DCP writes into the checkpoint's temporary directory; this rank hashes its own files
        (DCP names them __RANK_N.distcp). Returns this rank's report for the gather."""
        dcp.save(state, checkpoint_id=str(directory), process_group=self._group)
        try:
            mine = [path.name for path in directory.glob(f"__{self.ctx.rank}_*") if path.is_file()]
            return {"files": hash_files(directory, mine)}
        except OSError as error:
            return {"error": f"rank {self.ctx.rank} cannot hash its shards: {error}"}

    def _write_and_upload(self, state: dict[str, Any], folder: str) -> dict[str, Any]:
        """DCP writes into a spool directory of this rank's own (its shards; on rank 0 also
        DCP's index), uploaded whole into ``folder``, then removed. Returns this rank's report
        for the gather."""
        with spooled("shards") as directory:
            # Spool files need no fsync: a crash loses them either way, the upload is durable.
            writer = dcp.FileSystemWriter(str(directory), sync_files=False)
            dcp.save(state, storage_writer=writer, process_group=self._group)
            try:
                delay_s = self.store.commit_pause_s()
                return {"files": upload(self.store.storage, folder, directory, delay_s=delay_s)}
            except OSError as error:
                return {"error": f"rank {self.ctx.rank} cannot upload its shards: {error}"}

    def in_flight(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def take_commits(self) -> list[CommitRecord]:
        """Rank 0's commits since the last call (a background save's once it is done)."""
        taken, self._new_commits = self._new_commits, []
        return taken

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._failure.raise_if_any()

    def close(self) -> None:
        """Wait for the save in flight (committed when this returns on rank 0)."""
        try:
            self.wait()
        finally:
            self._stager.close()
