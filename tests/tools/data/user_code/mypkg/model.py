"""A task of a user's own package (`job.task: mypkg.model:build`), which an image built on the
trainer's carries beside it: tests/tools/test_run_local.py runs it with the process backend from
its directory (`image.context`)."""

from __future__ import annotations

import torch
from torch import nn

from trainer.task import Task, TaskContext


def build(ctx: TaskContext) -> Task:
    """Two-feature linear regression with its own data: y = 3 x0 - 2 x1 + 1."""
    generator = torch.Generator().manual_seed(ctx.seed)
    inputs = torch.rand(ctx.dataset_size, 2, generator=generator)
    targets = inputs @ torch.tensor([[3.0], [-2.0]]) + 1.0
    torch.manual_seed(ctx.seed)
    model = nn.Linear(2, 1).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return Task(model, optimizer, inputs, targets)
