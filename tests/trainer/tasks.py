"""Task factories for tests that need a trainer run to misbehave in a specific way."""

from __future__ import annotations

import os

import torch

from trainer.task import Task, TaskContext, regression_task


def failing_on_rank_1(ctx: TaskContext) -> Task:
    """The default task, except that rank 1's first loss computation raises."""
    task = regression_task(ctx)
    rank = int(os.environ.get("RANK", "0"))

    def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if rank == 1:
            raise RuntimeError("deliberate failure in the task on rank 1")
        return torch.nn.functional.mse_loss(output, target)

    task.loss_fn = loss_fn
    return task
