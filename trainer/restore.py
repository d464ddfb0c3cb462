"""Loading a checkpoint into a task: a resume (everything: weights, optimizer, scheduler, this
rank's RNG streams and partial epoch loss) or a warm start (weights, and the optimizer state
only when asked). Which checkpoint, and whether at all, is ``trainer.resume``'s decision.

Either checkpoint layout loads into either parallelism: a whole file into a DDP model as it is,
into an FSDP one shard by shard; a sharded checkpoint (``trainer.sharded``) through DCP, which
reshards it to this run's ranks or gives a plain model its whole tensors. Loading a sharded
checkpoint is collective: every rank calls these functions, and reads its files from this
machine (``trainer.checkpoint.shards_on_disk``: in place on a filesystem root, else downloaded
and checked against the manifest first)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint.api import CheckpointException

from trainer.checkpoint import shards_on_disk
from trainer.checkpoint_schema import RankState, TrainingCheckpoint
from trainer.parallelism import is_fully_sharded
from trainer.resume import ResumeRefusedError
from trainer.rng import restore_rng
from trainer.sharded import load_sharded, load_whole
from trainer.task import Task


def resume_from(task: Task, state: TrainingCheckpoint, rank: int, world_size: int) -> RankState:
    """Restore ``task`` from its own run's checkpoint; returns what this rank carries over
    (see :meth:`TrainingCheckpoint.rank_state` for a world size other than the saved one)."""
    if state.sharded_at is not None:
        with shards_on_disk(state.sharded_at) as directory:
            load_sharded(task.model, task.optimizer, directory)
    elif is_fully_sharded(task.model):
        load_whole(task.model, task.optimizer, state.model_state, state.optimizer_state)
    else:
        task.model.load_state_dict(state.model_state)
        task.optimizer.load_state_dict(state.optimizer_state)
    if task.scheduler is not None and state.scheduler_state is not None:
        task.scheduler.load_state_dict(state.scheduler_state)
    mine = state.rank_state(rank, world_size)
    restore_rng(mine.rng)
    return mine


def warm_start_from(
    task: Task, state: TrainingCheckpoint, path: str, *, task_name: str, with_optimizer: bool
) -> None:
    """Seed a new run: model weights, and the optimizer state only when asked."""
    if state.sharded_at is not None or is_fully_sharded(task.model):
        _warm_start_across_layouts(task, state, path, task_name, with_optimizer)
        return
    try:
        task.model.load_state_dict(state.model_state)
    except RuntimeError as error:
        raise ResumeRefusedError(
            f"--init-from {path}: its weights do not fit this run's model "
            f"(--task {task_name}): {error}"
        ) from None
    if with_optimizer:
        _load_optimizer_checked(task.optimizer, state.optimizer_state, path)


def _warm_start_across_layouts(
    task: Task, state: TrainingCheckpoint, path: str, task_name: str, with_optimizer: bool
) -> None:
    """A warm start from or into sharded state: one error for whatever does not fit (names,
    shapes; DCP raises its own exception type, not an Exception)."""
    sharded = state.sharded_at is not None
    if with_optimizer and not sharded and state.optimizer_state is None:
        raise ResumeRefusedError(f"--init-optimizer: {path} holds no optimizer state")
    try:
        if state.sharded_at is not None:
            with shards_on_disk(state.sharded_at) as directory:
                load_sharded(task.model, task.optimizer, directory, with_optimizer=with_optimizer)
        else:
            optimizer_state = state.optimizer_state if with_optimizer else None
            load_whole(task.model, task.optimizer, state.model_state, optimizer_state)
    except (RuntimeError, ValueError, KeyError, IndexError, CheckpointException) as error:
        what = "weights and optimizer state" if with_optimizer else "weights"
        raise ResumeRefusedError(
            f"--init-from {path}: its {what} do not fit this run's model (--task {task_name}): "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__}"
        ) from None


def _load_optimizer_checked(
    optimizer: torch.optim.Optimizer, saved: Mapping[str, Any] | None, path: str
) -> None:
    if saved is None:
        raise ResumeRefusedError(f"--init-optimizer: {path} holds no optimizer state")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, slots in saved.get("state", {}).items():
        for name, value in slots.items():
            if (
                isinstance(value, torch.Tensor)
                and value.dim() > 0
                and (index >= len(params) or value.shape != params[index].shape)
            ):
                raise ResumeRefusedError(
                    f"--init-optimizer: optimizer state {name!r} of parameter {index} in "
                    f"{path} has shape {tuple(value.shape)}, which does not match this "
                    "run's model; drop --init-optimizer to take the weights only"
                )
    try:
        optimizer.load_state_dict(saved)
    except (ValueError, KeyError) as error:
        raise ResumeRefusedError(
            f"--init-optimizer: the optimizer state in {path} does not fit this run's "
            f"optimizer ({error}); drop --init-optimizer to take the weights only"
        ) from None
