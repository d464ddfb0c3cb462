"""What a checkpoint file holds: the one place its keys are spelled.

A checkpoint is a plain dictionary on disk (``torch.save``), so that the tutorial's own
``torch.load(path)["MODEL_STATE"]`` keeps working, also with ``weights_only=True``. Everything
in the trainer, the inspection command, the bench and the tests builds and reads it through
:class:`TrainingCheckpoint`, so a key can neither be misspelled nor written without being read.

Where a checkpoint stands in the data: ``EPOCHS_RUN`` epochs done, and ``EPOCH_POSITION``
samples of the next one, in the epoch's sample order, which does not depend on the world size
(``trainer.data``), taken ``GLOBAL_BATCH`` at a time. That is all a resume on any number of
ranks needs; the manifest's step in the epoch is ``EPOCH_POSITION / GLOBAL_BATCH``.

Compatibility: files written by earlier trainers load unchanged. Version 1 files lack
``GLOBAL_BATCH`` and ``EPOCH_POSITION``: their global batch was the per-rank batch (``CONFIG``)
times ``WORLD_SIZE``, their position the manifest's step times that. Some carry a ``DATA_STATE``
entry (seed, epoch, step, steps per epoch) that this trainer ignores and no longer writes. A
version 1 reader would resume a version 2 file with its own ranks' batch as the global batch, a
different run, so version 2 files are refused by it (the reason for the bump).

Sharded checkpoints (``--parallelism fsdp``, ``trainer.sharded``) are a directory: the model and
optimizer state as torch.distributed.checkpoint (DCP) files, one or more per rank, and this
dictionary beside them with an empty ``MODEL_STATE`` and no ``OPTIMIZER_STATE``. It says
``FORMAT_VERSION`` 3 (:data:`SHARDED_FORMAT_VERSION`): a version 2 reader would take the empty
model state for the weights, so it must refuse. Whole-file checkpoints stay version 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Bumped only when a reader of this version could misread a newer file; readers refuse newer.
FORMAT_VERSION = 2  # what a whole-file checkpoint says
SHARDED_FORMAT_VERSION = 3  # what the dictionary beside a sharded checkpoint's files says
READABLE_VERSION = SHARDED_FORMAT_VERSION  # the newest this trainer reads

# The keys of the dictionary on disk. MODEL_STATE and EPOCHS_RUN are the tutorial's.
FORMAT_VERSION_KEY = "FORMAT_VERSION"
MODEL_STATE = "MODEL_STATE"
EPOCHS_RUN = "EPOCHS_RUN"
OPTIMIZER_STATE = "OPTIMIZER_STATE"
SCHEDULER_STATE = "SCHEDULER_STATE"
PER_RANK = "PER_RANK"
WORLD_SIZE = "WORLD_SIZE"
CONFIG = "CONFIG"
CONFIG_FINGERPRINT = "CONFIG_FINGERPRINT"
ORIGIN = "ORIGIN"
GLOBAL_BATCH = "GLOBAL_BATCH"
EPOCH_POSITION = "EPOCH_POSITION"
# Written by earlier trainers, ignored when read (see the module docstring).
LEGACY_DATA_STATE = "DATA_STATE"
# What a file needs to be resumed, warm-started from or inspected; the rest may be absent in
# files written by other tools (the bench, the tests) and then reads as empty.
REQUIRED_KEYS = (FORMAT_VERSION_KEY, MODEL_STATE, EPOCHS_RUN, WORLD_SIZE, CONFIG_FINGERPRINT)


class CheckpointError(RuntimeError):
    """A checkpoint directory or file cannot be used."""


@dataclass(frozen=True)
class RankState:
    """One rank's part of a checkpoint. Gathered to rank 0 (only rank 0 writes), stored as a
    list indexed by rank, so a restart with the same world size gives every rank back its own
    RNG streams and its partial epoch loss (see :meth:`TrainingCheckpoint.rank_state` for
    another world size)."""

    rng: Mapping[str, Any]
    loss_sum: float
    samples: int

    def to_state(self) -> dict[str, Any]:
        return {"rng": dict(self.rng), "loss_sum": self.loss_sum, "samples": self.samples}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RankState:
        return cls(state["rng"], float(state["loss_sum"]), int(state["samples"]))


@dataclass(frozen=True)
class TrainingCheckpoint:
    """A checkpoint as the trainer sees it. ``per_rank`` holds :meth:`RankState.to_state`
    dictionaries (what ``all_gather_object`` returned), indexed by rank."""

    model_state: Mapping[str, Any]
    epochs_run: int
    world_size: int
    config_fingerprint: str
    optimizer_state: Mapping[str, Any] | None = None
    scheduler_state: Mapping[str, Any] | None = None
    per_rank: Sequence[Any] = field(default_factory=list)
    config: Mapping[str, Any] | None = None
    origin: Mapping[str, Any] | None = None
    global_batch: int | None = None
    epoch_position: int | None = None
    format_version: int = FORMAT_VERSION
    # Not on disk: where a sharded checkpoint's DCP files are, set by whoever read it (the model
    # and optimizer state are loaded from there, ``trainer.sharded``); None for a whole file.
    sharded_at: str | None = None

    def to_state(self) -> dict[str, Any]:
        """The dictionary ``torch.save`` writes; no tensor is copied."""
        return {
            FORMAT_VERSION_KEY: self.format_version,
            MODEL_STATE: self.model_state,
            EPOCHS_RUN: self.epochs_run,
            OPTIMIZER_STATE: self.optimizer_state,
            SCHEDULER_STATE: self.scheduler_state,
            PER_RANK: list(self.per_rank),
            WORLD_SIZE: self.world_size,
            CONFIG: self.config,
            CONFIG_FINGERPRINT: self.config_fingerprint,
            ORIGIN: self.origin,
            GLOBAL_BATCH: self.global_batch,
            EPOCH_POSITION: self.epoch_position,
        }

    @classmethod
    def from_state(cls, state: Any, source: str = "checkpoint") -> TrainingCheckpoint:
        """Read a loaded dictionary, refusing what this trainer cannot use. ``source`` names
        the file in the error (CheckpointError), so the caller need not rephrase it."""
        if not isinstance(state, Mapping):
            raise CheckpointError(f"{source} does not hold a checkpoint dictionary")
        missing = [key for key in REQUIRED_KEYS if key not in state]
        if missing:
            raise CheckpointError(f"{source} lacks {', '.join(missing)}")
        version = int(state[FORMAT_VERSION_KEY])
        if version > READABLE_VERSION:
            raise CheckpointError(
                f"{source} has format version {version}, this trainer reads up to "
                f"{READABLE_VERSION}"
            )
        return cls(
            model_state=state[MODEL_STATE],
            epochs_run=int(state[EPOCHS_RUN]),
            world_size=int(state[WORLD_SIZE]),
            config_fingerprint=str(state[CONFIG_FINGERPRINT]),
            optimizer_state=state.get(OPTIMIZER_STATE),
            scheduler_state=state.get(SCHEDULER_STATE),
            per_rank=state.get(PER_RANK) or [],
            config=state.get(CONFIG),
            origin=state.get(ORIGIN),
            global_batch=_optional_int(state.get(GLOBAL_BATCH)),
            epoch_position=_optional_int(state.get(EPOCH_POSITION)),
            format_version=version,
        )

    def run_global_batch(self) -> int | None:
        """Samples per optimizer step of the run that wrote this file; None when a file of
        another tool does not say (no ``GLOBAL_BATCH``, no per-rank ``batch_size`` in
        ``CONFIG``)."""
        if self.global_batch is not None:
            return self.global_batch
        batch = (self.config or {}).get("batch_size")
        return int(batch) * self.world_size if batch is not None else None

    def rank_state(self, rank: int, world_size: int | None = None) -> RankState:
        """What rank ``rank`` of a run with ``world_size`` ranks restores. The same world size:
        its own state. Another: the RNG streams of rank ``rank % saved``, and the partial epoch
        loss of all saved ranks on rank 0 (none elsewhere), so the epoch's totals add up."""
        saved = len(self.per_rank)
        if world_size is None or world_size == saved:
            return RankState.from_state(self.per_rank[rank])
        states = [RankState.from_state(item) for item in self.per_rank]
        mine = states[rank % saved]
        if rank != 0:
            return RankState(mine.rng, 0.0, 0)
        return RankState(
            mine.rng, sum(item.loss_sum for item in states), sum(item.samples for item in states)
        )


def _optional_int(value: Any) -> int | None:
    return int(value) if value is not None else None
