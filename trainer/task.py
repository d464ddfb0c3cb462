"""The extension point: a *task* builds the model, the (in-memory) dataset, the optimizer and an
optional LR scheduler. ``--task MODULE:FUNCTION`` names a factory ``FUNCTION(ctx: TaskContext)
-> Task``; the default is the tutorial's regression, fixed so that it actually learns."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn


class TaskLoadError(ValueError):
    """``--task`` does not name an importable callable."""


@dataclass(frozen=True)
class TaskContext:
    """What a factory may use. Everything it builds must depend only on these values so that
    every rank and every restart builds the same model and data."""

    seed: int
    dataset_size: int
    device: torch.device


@dataclass
class Task:
    """``inputs``/``targets`` hold the whole dataset (first dimension = samples). The trainer
    moves them to the device once and slices batches by index, so there is no per-sample
    collation. ``scheduler`` (if any) is stepped once per epoch. ``blocks``: submodules of
    ``model`` that ``--parallelism fsdp`` shards as units of their own (its repeated layers),
    so that only one is whole on a rank at a time; none: the model is one unit."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    inputs: torch.Tensor
    targets: torch.Tensor
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = field(
        default=nn.functional.mse_loss
    )
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    blocks: Sequence[nn.Module] = ()


TaskFactory = Callable[[TaskContext], Task]


def regression_task(ctx: TaskContext) -> Task:
    """The tutorial's model (Linear(20, 1) + SGD) with a loss that learns (MSE, not
    cross_entropy on one column) and data from a dedicated seeded generator (not unseeded
    ``torch.rand``), so it is identical on every rank and restart. Momentum and a StepLR make
    optimizer and scheduler state matter for an exact resume."""
    data_gen = torch.Generator().manual_seed(ctx.seed)
    inputs = torch.rand(ctx.dataset_size, 20, generator=data_gen)
    true_weights = torch.randn(20, 1, generator=data_gen)
    noise = 0.01 * torch.randn(ctx.dataset_size, 1, generator=data_gen)
    targets = inputs @ true_weights + 0.5 + noise

    # A private generator for init keeps the global RNG free for the user's own use.
    init_gen = torch.Generator().manual_seed(ctx.seed + 1)
    model = nn.Linear(20, 1)
    with torch.no_grad():
        bound = 1.0 / 20**0.5
        model.weight.uniform_(-bound, bound, generator=init_gen)
        model.bias.uniform_(-bound, bound, generator=init_gen)
    model = model.to(ctx.device)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.9)
    return Task(model, optimizer, inputs, targets, nn.functional.mse_loss, scheduler)


def block_mlp_task(ctx: TaskContext, width: int = 64, depth: int = 2) -> Task:
    """The regression's data through a residual MLP of ``depth`` blocks of ``width``, named as
    blocks for ``--parallelism fsdp``: the smallest model that shards like a transformer does.
    Adam, whose two moments per parameter make sharded optimizer state matter."""
    base = regression_task(ctx)
    model = ResidualMLP(base.inputs.shape[1], width, depth, torch.Generator().manual_seed(ctx.seed))
    model = model.to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.9)
    return Task(
        model,
        optimizer,
        base.inputs,
        base.targets,
        nn.functional.mse_loss,
        scheduler,
        blocks=tuple(model.blocks),
    )


class ResidualMLP(nn.Module):
    def __init__(self, features: int, width: int, depth: int, generator: torch.Generator) -> None:
        super().__init__()
        self.embed = nn.Linear(features, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU())
            for _ in range(depth)
        )
        self.head = nn.Linear(width, 1)
        # A private generator: the same weights on every rank and restart (FSDP, unlike DDP,
        # does not broadcast rank 0's).
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    bound = 1.0 / module.in_features**0.5
                    module.weight.uniform_(-bound, bound, generator=generator)
                    module.bias.uniform_(-bound, bound, generator=generator)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(inputs)
        for block in self.blocks:
            hidden = hidden + block(hidden)
        return self.head(hidden)


def load_task_factory(spec: str) -> TaskFactory:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise TaskLoadError(f"must be MODULE:FUNCTION (e.g. mypkg.tasks:build), got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise TaskLoadError(
            f"cannot import module {module_name!r} from {spec!r}: {error}"
        ) from None
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise TaskLoadError(f"module {module_name!r} has no callable {attr!r} (from {spec!r})")
    return factory


def build_task(spec: str, ctx: TaskContext) -> Task:
    task = load_task_factory(spec)(ctx)
    if not isinstance(task, Task):
        raise TaskLoadError(f"{spec} returned {type(task).__name__}, expected trainer.task.Task")
    if task.inputs.shape[0] != task.targets.shape[0]:
        raise TaskLoadError(
            f"{spec}: inputs have {task.inputs.shape[0]} samples but targets have "
            f"{task.targets.shape[0]}"
        )
    return task
