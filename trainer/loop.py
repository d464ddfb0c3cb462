"""The training loop: resume from the point rank 0 chose (``trainer.resume``), train with DDP or
FSDP (``trainer.parallelism``), checkpoint on schedule (``trainer.save_schedule``: every
SAVE_EVERY epochs, every --save-every-steps steps, at the end) and on SIGTERM, and shut the
process group down cleanly.

A step trains one global batch, the same samples on any number of ranks (``trainer.data``): a
rank runs its share in one forward/backward pass, or in several micro-batches whose gradients
it accumulates locally (``trainer.parallelism.gradient_sync``) before the one reduction of the
step.

Who writes what: under DDP model and optimizer are replicated, so rank 0 writes them once;
under FSDP every rank writes its shards (``trainer.sharded_writer``) and rank 0 the rest. Each
rank's RNG states and partial epoch loss are gathered to rank 0 and stored as a list indexed by
rank, so a restart with the same world size gives every rank back its own RNG stream. What a
checkpoint holds is ``trainer.checkpoint_schema``; how it reaches the run's storage is
``trainer.async_writer`` (when, where) and ``trainer.checkpoint`` (the store), and the loop
knows the storage (``trainer.storage``) only by its interface, whichever backend it is. Rank 0
reports its progress through ``trainer.progress`` (a clock read per step; the rest every few
seconds and at each epoch's end).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

from trainer.async_writer import CheckpointWriter
from trainer.checkpoint import HOLD_AFTER_ENV, WRITE_DELAY_ENV, CheckpointStore, load_at
from trainer.checkpoint_schema import (
    FORMAT_VERSION,
    SHARDED_FORMAT_VERSION,
    RankState,
    TrainingCheckpoint,
)
from trainer.cli import (
    DEFAULT_PG_TIMEOUT_S,
    EXIT_PEER_LOST,
    EXIT_REFUSED,
    TrainConfig,
    UsageError,
    parse_config,
)
from trainer.data import GlobalBatches, MicroBatch
from trainer.distributed import (
    DistContext,
    all_gather_object,
    configure_logging,
    init_distributed,
    lost_a_peer,
    shutdown,
)
from trainer.metrics import EpochLoss, MetricsLog, rewind
from trainer.parallelism import FSDP, device_for_building, gradient_sync, parallelize
from trainer.progress import (
    ProgressReporter,
    RunShape,
    check_environment,
    job_name,
    open_reporter,
    restarts,
)
from trainer.prometheus_metrics import PrometheusMetrics
from trainer.restore import resume_from, warm_start_from
from trainer.resume import ResumePoint, ResumeRefusedError, decide_resume
from trainer.rng import capture_rng
from trainer.save_schedule import SaveSchedule
from trainer.sharded import training_state
from trainer.sharded_writer import ShardedWriter
from trainer.step_log import StepLog
from trainer.stop_agreement import StopAgreement
from trainer.storage import RunStorage, open_storage
from trainer.task import Task, TaskContext, build_task

LOG = logging.getLogger("trainer")


@dataclass
class Trainer:
    config: TrainConfig
    ctx: DistContext
    task: Task
    model: nn.Module  # what trains: a DDP wrapper of task.model, or task.model sharded (FSDP)
    data: GlobalBatches
    storage: RunStorage  # the run's root: checkpoints and metrics
    writer: CheckpointWriter | None  # rank 0 only, DDP
    sharded_writer: ShardedWriter | None = None  # every rank, FSDP
    origin: Mapping[str, Any] | None = None  # a warm start's source, kept in every checkpoint
    step_log: StepLog | None = None  # the TRAINER_STEP_LOG hook
    reporter: ProgressReporter | None = None  # rank 0's progress reports (trainer.progress)

    @classmethod
    def build(cls, config: TrainConfig, ctx: DistContext, global_batch: int) -> Trainer:
        building = device_for_building(config.parallelism, ctx.device)
        task = build_task(config.task, TaskContext(config.seed, config.dataset_size, building))
        inputs = task.inputs.to(ctx.device)
        targets = task.targets.to(ctx.device)
        data = GlobalBatches(
            inputs,
            targets,
            global_batch=global_batch,
            micro_batch=config.batch_size,
            seed=config.seed,
            rank=ctx.rank,
            world_size=ctx.world_size,
        )
        model = parallelize(task, ctx, config.parallelism)
        storage = open_storage(config.checkpoint_dir)
        delay = float(os.environ.get(WRITE_DELAY_ENV, "0") or 0)
        hold_after = os.environ.get(HOLD_AFTER_ENV)
        store = CheckpointStore(
            storage, config.keep, delay, int(hold_after) if hold_after else None
        )
        writer, sharded_writer = None, None
        if config.parallelism == FSDP:
            sharded_writer = ShardedWriter(store, ctx)
        elif ctx.is_main:
            writer = CheckpointWriter(store)
        step_log = StepLog.from_environment(ctx.rank, ctx.world_size)
        return cls(
            config, ctx, task, model, data, storage, writer, sharded_writer, step_log=step_log
        )

    def _chosen_checkpoint(
        self, location: str, state: TrainingCheckpoint | None
    ) -> TrainingCheckpoint:
        """Rank 0 already holds the state it verified; the others map the same object (on a
        filesystem its pages are in the cache on a shared node), so no rank reads it twice."""
        return state if state is not None else load_at(location)

    def checkpoint(
        self, epochs: int, step: int, loss: EpochLoss, samples: int, *, final: bool
    ) -> None:
        """Collective (every rank calls it); rank 0 hands the state to the background writer.
        ``step``: global batches done in epoch ``epochs`` (0 at an epoch's end)."""
        mine = RankState(capture_rng(), loss.total(), samples)
        per_rank = all_gather_object(self.ctx, mine.to_state())
        if self.sharded_writer is not None:
            meta = self.checkpoint_state(epochs, step, per_rank, tensors=False)
            self.sharded_writer.save(
                training_state(self.task.model, self.task.optimizer),
                meta if self.ctx.is_main else None,
                epochs,
                step,
                final=final,
            )
            return
        if self.writer is None:
            return
        state = self.checkpoint_state(epochs, step, per_rank)
        self.writer.save(state, epochs_completed=epochs, step_in_epoch=step, final=final)

    def checkpoint_state(
        self, epochs: int, step: int, per_rank: list[object], *, tensors: bool = True
    ) -> dict[str, Any]:
        """The dictionary a save writes: where in the data it was taken is the position in the
        epoch's sample order and the global batch, which hold on any world size. Without
        ``tensors``: a sharded checkpoint's, whose model and optimizer state are its shards."""
        scheduler = self.task.scheduler
        return TrainingCheckpoint(
            model_state=self.task.model.state_dict() if tensors else {},
            epochs_run=epochs,
            world_size=self.ctx.world_size,
            config_fingerprint=self.config.fingerprint(),
            optimizer_state=self.task.optimizer.state_dict() if tensors else None,
            scheduler_state=scheduler.state_dict() if scheduler is not None else None,
            per_rank=per_rank,
            config=self.config.semantic_config(),
            origin=self.origin,
            global_batch=self.data.global_batch,
            epoch_position=self.data.position(step),
            format_version=FORMAT_VERSION if tensors else SHARDED_FORMAT_VERSION,
        ).to_state()

    def restore(self, point: ResumePoint, state: TrainingCheckpoint | None) -> tuple[float, int]:
        """Everything before the first step: resume or warm start, rewind the metrics, prepare
        the checkpoint writer. ``state``: on rank 0, the checkpoint it read while choosing.
        Returns this rank's carried partial epoch loss and sample count."""
        carried = (0.0, 0)
        saved_world_size: int | None = None
        if point.location:
            chosen = self._chosen_checkpoint(point.location, state)
            mine = resume_from(self.task, chosen, self.ctx.rank, self.ctx.world_size)
            carried = (mine.loss_sum, mine.samples)
            saved_world_size = chosen.world_size
            self.origin = chosen.origin
        elif point.origin is not None:
            path = point.origin["path"]
            warm_start_from(
                self.task,
                self._chosen_checkpoint(path, state),
                path,
                task_name=self.config.task,
                with_optimizer=self.config.init_optimizer,
            )
            self.origin = point.origin
        if self.ctx.is_main:
            self._describe_batches(saved_world_size)
        if self.writer is not None:
            dropped = rewind(self.storage, point.epochs_completed)
            if dropped:
                LOG.info("metrics: dropped %d epoch row(s) after the resumed checkpoint", dropped)
            # Tells the writer policy how large checkpoints will be, before the first one.
            self.writer.prepare(self.checkpoint_state(point.epochs_completed, 0, []))
        if self.ctx.is_main:
            self.reporter = self._open_reporter(point)
        return carried

    def _open_reporter(self, point: ResumePoint) -> ProgressReporter:
        data = self.data
        shape = RunShape(
            job=job_name(os.environ),
            epochs=self.config.total_epochs,
            steps_per_epoch=data.steps_per_epoch(),
            dataset_size=data.dataset_size,
            global_batch=data.global_batch,
            world_size=self.ctx.world_size,
            start_epoch=point.epochs_completed,
            start_step=point.step_in_epoch,
            resumed=point.location is not None,
            restarts=restarts(os.environ),
        )
        committed = self.writer or self.sharded_writer
        optimizer = self.task.optimizer

        def learning_rate() -> float | None:
            lr = optimizer.param_groups[0].get("lr")
            return float(lr) if lr is not None else None

        return open_reporter(
            self.storage,
            shape,
            os.environ,
            learning_rate=learning_rate,
            commits=committed.take_commits if committed is not None else list,
        )

    def _describe_batches(self, saved_world_size: int | None) -> None:
        data, world = self.data, self.ctx.world_size
        accumulation = data.micro_batches_per_step()
        share, uneven = divmod(data.global_batch, world)
        how = f"{share} per process" if not uneven else f"{share} or {share + 1} per process"
        if accumulation > 1:
            how += f", in up to {accumulation} micro-batches of at most {data.micro_batch}"
        changed = ""
        if saved_world_size is not None and saved_world_size != world:
            changed = f" (the checkpoint was written with world size {saved_world_size})"
        # The nodes of this rendezvous round, as torchrun tells its workers (elastic jobs vary).
        nodes = os.environ.get("GROUP_WORLD_SIZE", "1")
        LOG.info(
            "world size %d on %s node(s)%s: each step trains the global batch of %d samples, %s",
            world,
            nodes,
            changed,
            data.global_batch,
            how,
        )

    def run(self, point: ResumePoint, stop: StopAgreement, carried: tuple[float, int]) -> bool:
        """Train to TOTAL_EPOCHS; False when an agreed stop (SIGTERM/SIGINT) ended it early.

        A step whose share is one micro-batch of weight 1 (the usual case) is kept to what the
        tutorial's loop does (forward, backward, step) plus two list appends: no per-step
        tensor arithmetic, allocation, host sync or clock read. Everything else (loss totals,
        stop agreement, metrics) runs per epoch or per check."""
        config = self.config
        model, loss_fn, optimizer = self.model, self.task.loss_fn, self.task.optimizer
        schedule = SaveSchedule(
            config.save_every,
            config.save_every_steps,
            self.data.steps_per_epoch(),
            config.total_epochs,
        )
        step_log, reporter = self.step_log, self.reporter
        steps_per_epoch = self.data.steps_per_epoch()
        metrics = MetricsLog(self.storage, config.total_epochs, point.epochs_completed)
        resumed = point.location is not None  # the first row this process writes says so
        start_step = point.step_in_epoch
        carried_loss, carried_samples = carried
        last_saved = (point.epochs_completed, point.step_in_epoch) if point.location else None
        # The first step creates the optimizer's lazy slots; the writer's staging buffer gets
        # them right after it, not inside the first save.
        slots_unstaged = self.writer is not None
        for epoch in range(point.epochs_completed, config.total_epochs):
            started = time.perf_counter()
            first_step = epoch * steps_per_epoch if reporter is not None else None
            loss = EpochLoss(carried_loss, first_step=first_step)
            samples = carried_samples
            carried_loss, carried_samples = 0.0, 0
            stopped_at: int | None = None
            saves: list[int] = []  # steps of this epoch done at each save, for metrics.jsonl
            for step, pieces in self.data.batches(epoch, start_step):
                if stop.at_step():
                    stopped_at = step
                    break
                if len(pieces) == 1 and pieces[0].scale == 1.0:
                    _, inputs, targets, size, _ = pieces[0]
                    step_loss = loss_fn(model(inputs), targets)
                    optimizer.zero_grad(set_to_none=True)
                    step_loss.backward()
                    optimizer.step()
                    loss.add(step_loss, size, step)
                    samples += size
                    losses: Sequence[torch.Tensor] = (step_loss,)
                else:
                    losses = self._accumulated_step(pieces, loss, step)
                    samples += sum(piece.size for piece in pieces)
                if step_log is not None:
                    step_log.record(epoch, step, pieces, losses)
                if slots_unstaged:
                    slots_unstaged = False
                    self.stage_optimizer_slots(epoch)
                done_steps = step + 1
                if reporter is not None and reporter.due():
                    reporter.during_epoch(epoch, done_steps, loss, samples)
                if schedule.after_step(epoch, done_steps):
                    self.checkpoint(epoch, done_steps, loss, samples, final=False)
                    last_saved = (epoch, done_steps)
                    saves.append(done_steps)
                    if stop.check():  # after slow work: see StopAgreement
                        stopped_at = done_steps
                        break
            start_step = 0
            if stopped_at is not None:
                if last_saved != (epoch, stopped_at):
                    self.checkpoint(epoch, stopped_at, loss, samples, final=True)
                return False
            done = epoch + 1
            final = done == config.total_epochs
            save_now = schedule.after_epoch(done)
            if save_now:
                saves.append(steps_per_epoch)
            self._end_epoch(epoch, metrics, loss, samples, started, saves, resumed)
            resumed = False
            if save_now:
                self.checkpoint(done, 0, EpochLoss(), 0, final=final)
                last_saved = (done, 0)
            if final:
                stop.drain()  # a stop asked for now has nothing left to stop
                return True
            if stop.check():  # the epoch's end (and its save) is a check point: see StopAgreement
                if last_saved != (done, 0):
                    self.checkpoint(done, 0, EpochLoss(), 0, final=True)
                return False
        return True

    def _accumulated_step(
        self, pieces: Sequence[MicroBatch], loss: EpochLoss, step: int
    ) -> list[torch.Tensor]:
        """One optimizer step over several micro-batches (or uneven shares): each weighted by
        its share of the window, gradients summed locally and all-reduced once, with the
        last backward pass."""
        model, loss_fn, optimizer = self.model, self.task.loss_fn, self.task.optimizer
        optimizer.zero_grad(set_to_none=True)
        losses = []
        last = len(pieces) - 1
        for index, piece in enumerate(pieces):
            with gradient_sync(model, index == last):
                piece_loss = loss_fn(model(piece.inputs), piece.targets)
                (piece_loss * piece.scale).backward()
            if piece.size:
                loss.add(piece_loss, piece.size, step)
            losses.append(piece_loss)
        optimizer.step()
        return losses

    def stage_optimizer_slots(self, epoch: int) -> None:
        """Give the writer's staging buffer the optimizer slots the first step created."""
        assert self.writer is not None
        self.writer.prepare(self.checkpoint_state(epoch, 0, []))

    def _end_epoch(
        self,
        epoch: int,
        metrics: MetricsLog,
        loss: EpochLoss,
        samples: int,
        started: float,
        saves: Sequence[int],
        resumed: bool,
    ) -> None:
        totals = torch.tensor([loss.total(), float(samples)], dtype=torch.float64)
        totals = totals.to(self.ctx.device)
        dist.all_reduce(totals)
        if self.task.scheduler is not None:
            self.task.scheduler.step()
        if self.ctx.is_main:
            total_loss, total_samples = totals.tolist()
            lr = self.task.optimizer.param_groups[0].get("lr")
            row = metrics.record(
                epoch + 1,
                total_loss / max(total_samples, 1),
                int(total_samples),
                time.perf_counter() - started,
                float(lr) if lr is not None else None,
                saves=saves,
                resumed=resumed,
            )
            if self.reporter is not None:
                self.reporter.epoch_end(epoch, row, loss)


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
    trainer = Trainer.build(config, ctx, point.global_batch)
    # The PodMonitor scrapes every pod of the job: rank 0's serves the run's figures (its
    # reporter), each other pod's first process answers with none, so no pod reads as down.
    other_pod = ctx.local_rank == 0 and not ctx.is_main
    pod_metrics = PrometheusMetrics.from_environment(os.environ) if other_pod else None
    try:
        carried = trainer.restore(point, state)
        del state  # rank 0's copy of a possibly large checkpoint is not kept while training
        completed = trainer.run(point, stop, carried)
    finally:
        # A SIGTERM or the end of training commits the write in flight.
        for writer in (trainer.writer, trainer.sharded_writer):
            if writer is not None:
                writer.close()
        if trainer.step_log is not None:
            trainer.step_log.close()
        if trainer.reporter is not None:
            trainer.reporter.close()  # after the writers: the final save is reported too
        if pod_metrics is not None:
            pod_metrics.close()
    committed = trainer.writer or trainer.sharded_writer
    if ctx.is_main and committed is not None and committed.last_committed is not None:
        entry = committed.last_committed
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
        check_environment(os.environ)
    except (UsageError, ValueError) as error:
        config, refusal = None, f"error: {error}"
    ctx = init_distributed(config.pg_timeout if config is not None else DEFAULT_PG_TIMEOUT_S)
    configure_logging(ctx.rank)
    code = EXIT_REFUSED
    if config is not None:
        try:
            code = train(config, ctx)
        except ResumeRefusedError as error:
            refusal = f"error: refusing to start: {error}"
        except Exception as error:
            if not lost_a_peer(error):
                raise
            # Every surviving rank says it: on a cluster each pod's log is read on its own.
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            print(
                f"error: rank {ctx.rank} lost a peer ({type(error).__name__}: {first_line}); "
                f"exiting with code {EXIT_PEER_LOST}, which restarts the pod (restartPolicy "
                "ExitCode or OnFailure) and resumes from the last checkpoint",
                file=sys.stderr,
                flush=True,
            )
            code = EXIT_PEER_LOST
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
