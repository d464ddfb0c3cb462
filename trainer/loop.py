"""The training loop: resume from the point rank 0 chose (``trainer.resume``), train with DDP,
checkpoint on schedule / on SIGTERM / at the end, and shut the process group down cleanly.

Who writes what: model and optimizer are replicated by DDP, so rank 0 writes them once. Each
rank's RNG states and partial epoch loss are gathered to rank 0 and stored as a list indexed by
rank, so a restart with the same world size gives every rank back its own RNG stream. What a
checkpoint holds is ``trainer.checkpoint_schema``; how it reaches the disk is
``trainer.async_writer`` (when, where) and ``trainer.checkpoint`` (the store).
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from trainer.async_writer import CheckpointWriter
from trainer.checkpoint import WRITE_DELAY_ENV, CheckpointStore, load_checkpoint
from trainer.checkpoint_schema import RankState, TrainingCheckpoint
from trainer.cli import (
    DEFAULT_PG_TIMEOUT_S,
    EXIT_REFUSED,
    TrainConfig,
    UsageError,
    parse_config,
)
from trainer.data import ShardedBatches
from trainer.distributed import (
    DistContext,
    all_gather_object,
    configure_logging,
    init_distributed,
    shutdown,
)
from trainer.metrics import MetricsLog, rewind
from trainer.resume import ResumePoint, ResumeRefusedError, decide_resume
from trainer.stop_agreement import StopAgreement
from trainer.task import Task, TaskContext, build_task

LOG = logging.getLogger("trainer")


def capture_rng() -> dict[str, Any]:
    """Every RNG a user's task might draw from, as plain types (loadable with weights_only)."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": [
            np_kind,
            torch.from_numpy(np_keys.astype(np.int64)),
            np_pos,
            np_has_gauss,
            np_gauss,
        ],
        "python": [py_version, list(py_state), py_gauss],
    }


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, py_state, gauss_py = state["python"]
    random.setstate((version, tuple(py_state), gauss_py))


class EpochLoss:
    """This rank's sample-weighted loss sum over (part of) an epoch.

    A step only appends its detached loss (no kernel, no allocation beyond the list slot, no
    host sync on a GPU); the sum is folded on the host when it is read (epoch end, checkpoint)
    with one transfer for all pending steps. The fold adds ``loss * batch`` in float64 in step
    order, exactly what a per-step ``float64_sum.add_(loss, alpha=batch)`` computed, so the
    metrics of an interrupted and an uninterrupted run stay equal to the bit."""

    def __init__(self, carried: float = 0.0) -> None:
        self._sum = carried
        self._losses: list[torch.Tensor] = []
        self._sizes: list[int] = []

    def add(self, loss: torch.Tensor, batch: int) -> None:
        self._losses.append(loss.detach())
        self._sizes.append(batch)

    def total(self) -> float:
        if self._losses:
            values = torch.stack(self._losses).to("cpu", torch.float64).tolist()
            for value, size in zip(values, self._sizes, strict=True):
                self._sum += value * size
            self._losses.clear()
            self._sizes.clear()
        return self._sum


@dataclass
class Trainer:
    config: TrainConfig
    ctx: DistContext
    task: Task
    model: DistributedDataParallel
    data: ShardedBatches
    writer: CheckpointWriter | None  # rank 0 only
    origin: Mapping[str, Any] | None = None  # a warm start's source, kept in every checkpoint

    @classmethod
    def build(cls, config: TrainConfig, ctx: DistContext) -> Trainer:
        task = build_task(config.task, TaskContext(config.seed, config.dataset_size, ctx.device))
        inputs = task.inputs.to(ctx.device)
        targets = task.targets.to(ctx.device)
        data = ShardedBatches(
            inputs, targets, config.batch_size, config.seed, ctx.rank, ctx.world_size
        )
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        model = DistributedDataParallel(task.model, device_ids=device_ids)
        writer = None
        if ctx.is_main:
            delay = float(os.environ.get(WRITE_DELAY_ENV, "0") or 0)
            writer = CheckpointWriter(CheckpointStore(config.checkpoint_dir, config.keep, delay))
        return cls(config, ctx, task, model, data, writer)

    def _chosen_checkpoint(self, path: str, state: TrainingCheckpoint | None) -> TrainingCheckpoint:
        """Rank 0 already holds the state it verified; the others map the same file (its pages
        are in the cache on a shared node), so no rank reads it twice."""
        return state if state is not None else load_checkpoint(Path(path), mmap=True)

    def warm_start(self, point: ResumePoint, state: TrainingCheckpoint | None) -> None:
        """Seed a new run: model weights, and the optimizer state only when asked."""
        assert point.origin is not None
        state = self._chosen_checkpoint(point.origin["path"], state)
        try:
            self.task.model.load_state_dict(state.model_state)
        except RuntimeError as error:
            raise ResumeRefusedError(
                f"--init-from {point.origin['path']}: its weights do not fit this run's model "
                f"(--task {self.config.task}): {error}"
            ) from None
        if self.config.init_optimizer:
            self._load_optimizer_checked(state.optimizer_state, point.origin["path"])

    def _load_optimizer_checked(self, saved: Mapping[str, Any] | None, path: str) -> None:
        if saved is None:
            raise ResumeRefusedError(f"--init-optimizer: {path} holds no optimizer state")
        params = [p for group in self.task.optimizer.param_groups for p in group["params"]]
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
            self.task.optimizer.load_state_dict(saved)
        except (ValueError, KeyError) as error:
            raise ResumeRefusedError(
                f"--init-optimizer: the optimizer state in {path} does not fit this run's "
                f"optimizer ({error}); drop --init-optimizer to take the weights only"
            ) from None

    def load(self, point: ResumePoint, state: TrainingCheckpoint | None) -> tuple[float, int]:
        """Restore from the exact file rank 0 chose; returns this rank's partial epoch loss."""
        assert point.path is not None
        state = self._chosen_checkpoint(point.path, state)
        self.task.model.load_state_dict(state.model_state)
        self.task.optimizer.load_state_dict(state.optimizer_state)
        if self.task.scheduler is not None and state.scheduler_state is not None:
            self.task.scheduler.load_state_dict(state.scheduler_state)
        mine = state.rank_state(self.ctx.rank)
        restore_rng(mine.rng)
        return mine.loss_sum, mine.samples

    def checkpoint(
        self, epochs: int, step: int, loss: EpochLoss, samples: int, *, final: bool
    ) -> None:
        """Collective (every rank calls it); rank 0 hands the state to the background writer."""
        mine = RankState(capture_rng(), loss.total(), samples)
        per_rank = all_gather_object(self.ctx, mine.to_state())
        if self.writer is None:
            return
        state = self.checkpoint_state(epochs, per_rank)
        self.writer.save(state, epochs_completed=epochs, step_in_epoch=step, final=final)

    def checkpoint_state(self, epochs: int, per_rank: list[object]) -> dict[str, Any]:
        """The dictionary a save writes. Where in the data it was taken is not part of it:
        (epochs, step) in the manifest and the file name locate it, and the data order follows
        from the seed and world size the checkpoint already records."""
        scheduler = self.task.scheduler
        return TrainingCheckpoint(
            model_state=self.task.model.state_dict(),
            epochs_run=epochs,
            world_size=self.ctx.world_size,
            config_fingerprint=self.config.fingerprint(),
            optimizer_state=self.task.optimizer.state_dict(),
            scheduler_state=scheduler.state_dict() if scheduler is not None else None,
            per_rank=per_rank,
            config=self.config.semantic_config(),
            origin=self.origin,
        ).to_state()

    def restore(self, point: ResumePoint, state: TrainingCheckpoint | None) -> tuple[float, int]:
        """Everything before the first step: resume or warm start, rewind the metrics, prepare
        the checkpoint writer. ``state``: on rank 0, the checkpoint it read while choosing."""
        carried = (0.0, 0)
        if point.path:
            carried = self.load(point, state)
            self.origin = state.origin if state is not None else None
        elif point.origin is not None:
            self.warm_start(point, state)
            self.origin = point.origin
        if self.writer is not None:
            dropped = rewind(self.config.checkpoint_dir, point.epochs_completed)
            if dropped:
                LOG.info("metrics: dropped %d epoch row(s) after the resumed checkpoint", dropped)
            # Tells the writer policy how large checkpoints will be, before the first one.
            self.writer.prepare(self.checkpoint_state(point.epochs_completed, []))
        return carried

    def run(self, point: ResumePoint, stop: StopAgreement, carried: tuple[float, int]) -> bool:
        """Train to TOTAL_EPOCHS; False when an agreed stop (SIGTERM/SIGINT) ended it early.

        The step itself is kept to what the tutorial's loop does (forward, backward, step) plus
        two list appends: no per-step tensor arithmetic, allocation, host sync or clock read.
        Everything else (loss totals, stop agreement, metrics) runs per epoch or per check."""
        config = self.config
        model, loss_fn, optimizer = self.model, self.task.loss_fn, self.task.optimizer
        steps_per_epoch = self.data.steps_per_epoch()
        metrics = MetricsLog(config.checkpoint_dir, config.total_epochs, point.epochs_completed)
        start_step = point.step_in_epoch
        carried_loss, carried_samples = carried
        last_saved = (point.epochs_completed, point.step_in_epoch) if point.path else None
        # The first step creates the optimizer's lazy slots; the writer's staging buffer gets
        # them right after it, not inside the first save.
        slots_unstaged = self.writer is not None
        for epoch in range(point.epochs_completed, config.total_epochs):
            started = time.perf_counter()
            loss = EpochLoss(carried_loss)
            samples = carried_samples
            carried_loss, carried_samples = 0.0, 0
            stopped_at: int | None = None
            for step, inputs, targets in self.data.batches(epoch, start_step):
                if stop.at_step():
                    stopped_at = step
                    break
                step_loss = loss_fn(model(inputs), targets)
                optimizer.zero_grad(set_to_none=True)
                step_loss.backward()
                optimizer.step()
                loss.add(step_loss, inputs.shape[0])
                samples += inputs.shape[0]
                if slots_unstaged:
                    slots_unstaged = False
                    self.stage_optimizer_slots(epoch)
            start_step = 0
            if stopped_at is None and stop.drain():
                stopped_at = steps_per_epoch
            if stopped_at is not None and stopped_at < steps_per_epoch:
                if last_saved != (epoch, stopped_at):
                    self.checkpoint(epoch, stopped_at, loss, samples, final=True)
                return False
            self._end_epoch(epoch, metrics, loss, samples, started)
            done = epoch + 1
            final = done == config.total_epochs or stopped_at is not None
            if done % config.save_every == 0 or final:
                self.checkpoint(done, 0, EpochLoss(), 0, final=final)
                last_saved = (done, 0)
            if stopped_at is not None:
                return done == config.total_epochs
        return True

    def stage_optimizer_slots(self, epoch: int) -> None:
        """Give the writer's staging buffer the optimizer slots the first step created."""
        assert self.writer is not None
        self.writer.prepare(self.checkpoint_state(epoch, []))

    def _end_epoch(
        self, epoch: int, metrics: MetricsLog, loss: EpochLoss, samples: int, started: float
    ) -> None:
        totals = torch.tensor([loss.total(), float(samples)], dtype=torch.float64)
        totals = totals.to(self.ctx.device)
        dist.all_reduce(totals)
        if self.task.scheduler is not None:
            self.task.scheduler.step()
        if self.ctx.is_main:
            total_loss, total_samples = totals.tolist()
            lr = self.task.optimizer.param_groups[0].get("lr")
            metrics.record(
                epoch + 1,
                total_loss / max(total_samples, 1),
                int(total_samples),
                time.perf_counter() - started,
                float(lr) if lr is not None else None,
            )


def train(config: TrainConfig, ctx: DistContext) -> int:
    stop = StopAgreement(ctx)
    stop.install()  # before anything slow, so an early SIGTERM is not lost
    point, state = decide_resume(ctx, config)
    if point.epochs_completed >= config.total_epochs:
        if ctx.is_main:
            LOG.info(
                "run already complete: %d of %d epochs done, nothing to train",
                point.epochs_completed,
                config.total_epochs,
            )
        return 0
    trainer = Trainer.build(config, ctx)
    try:
        carried = trainer.restore(point, state)
        del state  # rank 0's copy of a possibly large checkpoint is not kept while training
        completed = trainer.run(point, stop, carried)
    finally:
        if trainer.writer is not None:
            trainer.writer.close()  # a SIGTERM or the end of training commits the write in flight
    if ctx.is_main and trainer.writer.last_committed is not None:
        entry = trainer.writer.last_committed
        LOG.info("last checkpoint: %s (%d epochs completed)", entry.file, entry.epochs_completed)
    if completed:
        return 0
    LOG.info("stopped early on a signal with its checkpoint committed; a restart resumes it")
    return stop.exit_code()


@record  # an unexpected exception's message reaches the launcher (see trainer.launch)
def main(argv: Sequence[str] | None = None) -> int:
    """A refusal (bad arguments, a checkpoint directory of another run) is one line from rank 0
    and EXIT_REFUSED, never a traceback: a user's mistake, which no restart can fix. Every rank
    refuses the same thing; the others wait for rank 0 at the closing barrier, so that none
    exits first and has torchrun stop rank 0 before it said why."""
    refusal: str | None = None
    try:
        config: TrainConfig | None = parse_config(argv)
    except UsageError as error:
        config, refusal = None, f"error: {error}"
    ctx = init_distributed(config.pg_timeout if config is not None else DEFAULT_PG_TIMEOUT_S)
    configure_logging(ctx.rank)
    code = EXIT_REFUSED
    if config is not None:
        try:
            code = train(config, ctx)
        except ResumeRefusedError as error:
            refusal = f"error: refusing to start: {error}"
    if refusal is not None and ctx.is_main:
        print(refusal, file=sys.stderr, flush=True)
    # Training is over (and, on success, its last checkpoint is committed): a failing teardown
    # must not turn a finished run into a failed pod, so it is logged, not raised.
    try:
        shutdown(ctx)
    except Exception as error:
        LOG.warning("process-group teardown failed after training finished: %s", error)
    LOG.info("exiting with code %d", code)
    return code
