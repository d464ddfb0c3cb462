"""When and where a sharded checkpoint is written (``--parallelism fsdp``): by every rank, its
own shards, in the background, committed by rank 0 once all of them are out.

A save (collective) copies this rank's shards of the model and optimizer state into a staging
copy (DCP's own stager: reused buffers, pinned memory on CUDA) and hands it to a writer thread,
so the loop waits only for that copy, as the DDP path's writer process does. The thread writes
the shards with torch.distributed.checkpoint into the checkpoint's temporary directory, hashes
the files it wrote, and gathers every rank's hashes to rank 0, which commits the directory
through the store (``CheckpointStore.commit_sharded``: rename, manifest, retention). DCP's and
our collectives run on a process group of their own (gloo), so a write in flight never
interleaves with the training loop's collectives. At most one save is in flight; ``wait``
blocks until it is committed (the next save, a stop, the end of training). A final save is
written in the caller's thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from trainer.checkpoint import (
    CheckpointEntry,
    CheckpointError,
    CheckpointStore,
    checkpoint_name,
    sharded_staging_name,
)
from trainer.distributed import DistContext
from trainer.sharded import hash_files

LOG = logging.getLogger("trainer")


class ShardedWriter:
    """One rank's side of the run's sharded checkpoints. Construct it on every rank (it creates
    a process group, a collective)."""

    def __init__(self, store: CheckpointStore, ctx: DistContext, *, background: bool = True):
        root = store.storage.local_directory()
        if root is None:
            raise CheckpointError(
                f"--parallelism fsdp writes sharded checkpoints to a filesystem; "
                f"{store.storage.location} is not one"
            )
        self.store = store
        self.root = root
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
        self._error: BaseException | None = None
        self.last_committed: CheckpointEntry | None = None  # rank 0 only
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
        staging = sharded_staging_name(name)
        if self.ctx.is_main:
            # What a failed attempt left; no rank writes before rank 0 joins DCP's planning.
            self.store.storage.delete(staging)
        args = (meta, staging, epochs_completed, step_in_epoch)
        if final or not self.background:
            self._write_and_commit(dict(state), *args)
            self.last_mode = "inline"
            return
        staged = self._stager.stage(dict(state))
        self._thread = threading.Thread(
            target=self._in_background, args=(staged, *args), name="sharded-checkpoint-writer"
        )
        self._thread.start()
        self.last_mode = "background"

    def _in_background(self, state: dict[str, Any], *args: Any) -> None:
        try:
            self._write_and_commit(state, *args)
        except BaseException as error:
            self._error = error

    def _write_and_commit(
        self,
        state: dict[str, Any],
        meta: Mapping[str, Any] | None,
        staging: str,
        epochs: int,
        step: int,
    ) -> None:
        directory = self.root / staging
        dcp.save(state, checkpoint_id=str(directory), process_group=self._group)
        # DCP names a rank's files __RANK_N.distcp; the rank that wrote them hashes them.
        mine = hash_files(
            directory,
            [path.name for path in directory.glob(f"__{self.ctx.rank}_*") if path.is_file()],
        )
        gathered: list[Any] = [None] * self.ctx.world_size if self.ctx.is_main else []
        dist.gather_object(mine, gathered if self.ctx.is_main else None, 0, self._group)
        if not self.ctx.is_main:
            return
        assert meta is not None, "rank 0 saves the training state beside the shards"
        shards: dict[str, Any] = {}
        for files in gathered:
            shards.update(files)
        entry = self.store.commit_sharded(staging, meta, shards, epochs, step)
        self.last_committed = entry
        LOG.info(
            "checkpoint committed: %s (%d files, %d bytes)",
            self.store.storage.location_of(entry.file),
            len(entry.files or ()),
            entry.size,
        )

    def in_flight(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(f"checkpoint write failed: {error}") from error

    def close(self) -> None:
        """Wait for the save in flight (committed when this returns on rank 0)."""
        try:
            self.wait()
        finally:
            self._stager.close()
