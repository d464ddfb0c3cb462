"""Tasks for bench/gpu_check.py (``--task bench.gpu_tasks:large_state``): the default task's data
with a model whose training state (weights plus SGD momentum) is about ``GPU_CHECK_STATE_MB``
megabytes, default 2048: the size of checkpoint a real GPU job writes."""

from __future__ import annotations

import math
import os

import torch
from torch import nn

from trainer.task import Task, TaskContext, block_mlp_task, regression_task

STATE_MB_ENV = "GPU_CHECK_STATE_MB"
DEFAULT_STATE_MB = 2048


def hidden_width(state_mb: int) -> int:
    """The width W of the W x W layer that holds (almost) all of the state: half of it the
    float32 weights, half their momentum."""
    return max(int(math.sqrt(state_mb * 2**20 / 4 / 2)), 8)


def large_state(ctx: TaskContext) -> Task:
    base = regression_task(ctx)  # its data, identical on every rank and restart
    width = hidden_width(int(os.environ.get(STATE_MB_ENV, DEFAULT_STATE_MB)))
    features = base.inputs.shape[1]
    torch.manual_seed(ctx.seed + 2)  # DDP broadcasts rank 0's weights anyway
    model = nn.Sequential(
        nn.Linear(features, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 1),
    ).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    return Task(model, optimizer, base.inputs, base.targets, nn.functional.mse_loss)


FSDP_WIDTH_ENV = "GPU_CHECK_FSDP_WIDTH"
FSDP_DEPTH_ENV = "GPU_CHECK_FSDP_DEPTH"
DEFAULT_FSDP_WIDTH = 4096
DEFAULT_FSDP_DEPTH = 16


def sharded_mlp(ctx: TaskContext) -> Task:
    """``--task bench.gpu_tasks:sharded_mlp``: the trainer's residual MLP (its blocks named for
    FSDP, Adam) at ``GPU_CHECK_FSDP_DEPTH`` blocks of ``GPU_CHECK_FSDP_WIDTH`` (default 16 of
    4096: 268M parameters, 4.3 GB of weights and Adam moments in float32), the model of the
    FSDP measurements (bench/fsdp_memory.py, the GPU check's ``fsdp`` phase)."""
    width = int(os.environ.get(FSDP_WIDTH_ENV, DEFAULT_FSDP_WIDTH))
    depth = int(os.environ.get(FSDP_DEPTH_ENV, DEFAULT_FSDP_DEPTH))
    return block_mlp_task(ctx, width=width, depth=depth)
