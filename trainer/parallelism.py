"""How the task's model is spread over the ranks (``--parallelism``): replicated with DDP, or
sharded with FSDP2 (``torch.distributed.fsdp.fully_shard``), parameters, gradients and optimizer
state alike, so that a rank holds 1/world of them between the layers it is running.

FSDP2 wraps each of the task's ``blocks`` (its transformer layers, say) as a unit of its own,
then the whole model: a block's parameters are gathered just before it runs and freed right
after, so at most one block is ever whole on a rank. A task that names no blocks is one unit.
On CUDA the gathered parameters are bfloat16 and gradients are reduced in float32 (the mixed
precision torchtitan uses); on the CPU (gloo, the tests) everything stays float32.

The model is built on the CPU for FSDP (``device_for_building``): each unit's parameters move to
the device as it is sharded, so the device never holds the whole model. ``fully_shard``
replaces the parameters by sharded ones, so the task's optimizer, built on the old ones, is
pointed at the new ones (it has no state yet). Either way the loop trains through
:func:`gradient_sync`, the one place that knows how each skips a gradient reduction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.distributed import DistContext
from trainer.task import Task

DDP = "ddp"
FSDP = "fsdp"


def device_for_building(parallelism: str, device: torch.device) -> torch.device:
    """Where the task builds its model: the CPU for FSDP (sharding moves each unit to the
    device), the device itself for DDP."""
    return torch.device("cpu") if parallelism == FSDP else device


def parallelize(task: Task, ctx: DistContext, parallelism: str) -> nn.Module:
    """The module the loop trains: a DDP wrapper around ``task.model``, or ``task.model`` itself
    sharded in place (an FSDP module: its ``state_dict`` holds this rank's shards)."""
    if parallelism == FSDP:
        return _fully_shard(task, ctx)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(task.model, device_ids=device_ids)


def _fully_shard(task: Task, ctx: DistContext) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model, optimizer = task.model, task.optimizer
    if any(optimizer.state.values()):
        raise ValueError("the task's optimizer already has state; FSDP shards a fresh one")
    name_of = {id(param): name for name, param in model.named_parameters()}
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    options: dict[str, Any] = {"mesh": mesh}
    if ctx.device.type == "cuda":
        options["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    for block in task.blocks:
        fully_shard(block, **options)
    fully_shard(model, **options)
    sharded = dict(model.named_parameters())
    for group in optimizer.param_groups:
        group["params"] = [sharded[name_of[id(param)]] for param in group["params"]]
    return model


def is_fully_sharded(model: nn.Module) -> bool:
    """Whether ``model`` was sharded by :func:`parallelize` (its state dict holds shards)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Inside, a backward pass reduces gradients over the ranks only when ``enabled``; when
    not, they accumulate on this rank for a later micro-batch's backward to reduce."""
    if isinstance(model, DistributedDataParallel):
        with contextlib.nullcontext() if enabled else model.no_sync():
            yield
        return
    model.set_requires_gradient_sync(enabled)  # type: ignore[operator]
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)  # type: ignore[operator]
