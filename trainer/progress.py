"""When rank 0 reports, and what: the ``ProgressReporter`` the training loop calls, which turns
the loop's plain counters into a ``trainer.report.Snapshot`` every ``TRAINER_REPORT_EVERY_S``
seconds (default 15), at each epoch's end and at the end, and hands it to the sinks
(``trainer.report``): the ``@progress`` line in the log (``trainer.progress_line``), Prometheus
(``trainer.prometheus_metrics``, with ``METRICS_PORT``), TensorBoard
(``trainer.tensorboard_log``, unless ``TRAINER_TENSORBOARD=0``).

Per step the loop pays one clock read and a comparison (``due``); everything else happens at a
report. A sink that fails to start (a port in use, an unwritable directory) stops the run before
the first step with its reason; one that fails later is logged and dropped, since a lost metric
must not cost the training run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from trainer.checkpoint import CommitRecord
from trainer.metrics import EpochLoss, EpochMetrics
from trainer.progress_line import ProgressLine
from trainer.prometheus_metrics import PrometheusMetrics, parse_port
from trainer.report import CheckpointSaved, ReportSink, Snapshot, StepLoss
from trainer.storage import RunStorage
from trainer.tensorboard_log import TensorBoardLog
from trainer.tensorboard_log import enabled as tensorboard_enabled

LOG = logging.getLogger("trainer")
REPORT_EVERY_ENV = "TRAINER_REPORT_EVERY_S"
DEFAULT_REPORT_EVERY_S = 15.0
JOB_NAME_ENV = "JOB_NAME"  # set on every pod by the stack (builders/manifests.py contract_env)
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"


def report_every(environ: Mapping[str, str]) -> float:
    """``TRAINER_REPORT_EVERY_S``: seconds between reports, 1 to 3600."""
    raw = environ.get(REPORT_EVERY_ENV, "").strip()
    if not raw:
        return DEFAULT_REPORT_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 1 <= value <= 3600:
        raise ValueError(
            f"{REPORT_EVERY_ENV}={raw!r}: expected seconds between reports, from 1 to 3600"
        )
    return value


@dataclass(frozen=True)
class RunShape:
    """What the reporter needs to know about the run to turn counters into progress."""

    job: str
    epochs: int
    steps_per_epoch: int
    dataset_size: int  # samples per epoch, every rank's together
    global_batch: int
    world_size: int
    start_epoch: int  # where this process started (a resume's point)
    start_step: int
    resumed: bool
    restarts: int

    def samples_before(self, epoch: int, step: int) -> int:
        """Samples of the whole run trained once ``step`` steps of (0-based) ``epoch`` are
        done, every rank's together."""
        return epoch * self.dataset_size + min(step * self.global_batch, self.dataset_size)

    def global_step(self, epoch: int, step: int) -> int:
        return epoch * self.steps_per_epoch + step


@dataclass
class ProgressReporter:
    """Rank 0's reporter; the other ranks have none. Not thread-safe: the loop's thread only."""

    shape: RunShape
    sinks: list[ReportSink]
    every_s: float = DEFAULT_REPORT_EVERY_S
    learning_rate: Callable[[], float | None] = lambda: None
    commits: Callable[[], list[CommitRecord]] = list  # new commits since the last call
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    next_due: float = field(init=False)
    _started: float = field(init=False)
    _last_time: float = field(init=False)
    _last_samples: int = field(init=False)
    _last_checkpoint: CheckpointSaved | None = field(init=False, default=None)
    _samples_per_s: float = field(init=False, default=0.0)
    _snapshot: Snapshot | None = field(init=False, default=None)
    _start_samples: int = field(init=False)

    def __post_init__(self) -> None:
        now = self.clock()
        self._started = self._last_time = now
        self.next_due = now + self.every_s
        shape = self.shape
        self._start_samples = shape.samples_before(shape.start_epoch, shape.start_step)
        self._last_samples = self._start_samples

    # -- what the loop calls ------------------------------------------------------------------

    def due(self) -> bool:
        return self.clock() >= self.next_due

    def during_epoch(self, epoch: int, done_steps: int, loss: EpochLoss, samples: int) -> None:
        """A report mid-epoch (the loop calls it when ``due``): ``loss`` and ``samples`` are
        rank 0's so far in 0-based ``epoch`` (a resume's carried share included)."""
        mean = loss.total() / samples if samples else None
        self._report(epoch, done_steps, mean, loss_is_global=False, losses=loss.drain_steps())

    def epoch_end(self, epoch: int, metrics: EpochMetrics, loss: EpochLoss) -> None:
        """0-based ``epoch`` finished; ``metrics`` holds its all-reduced loss."""
        steps = self.shape.steps_per_epoch
        self._report(epoch, steps, metrics.loss, loss_is_global=True, losses=loss.drain_steps())

    def close(self) -> None:
        """The run ends: report the commits that finished since (the final save's), then close
        every sink. The last snapshot says ``done`` when the last epoch finished."""
        try:
            if self._snapshot is not None and self._deliver_commits():
                final = replace(self._snapshot, last_checkpoint=self._last_checkpoint)
                self._snapshot = final
                self._each_sink(lambda sink: sink.report(final, ()))
        finally:
            for sink in list(self.sinks):
                try:
                    sink.close()
                except Exception as error:  # a metric lost at the end costs nothing
                    LOG.warning("reporting: %s failed to close: %s", type(sink).__name__, error)

    # -- the report ---------------------------------------------------------------------------

    def _report(
        self,
        epoch: int,
        done_steps: int,
        loss: float | None,
        *,
        loss_is_global: bool,
        losses: Sequence[tuple[int, float]],
    ) -> None:
        shape = self.shape
        now = self.clock()
        samples = shape.samples_before(epoch, done_steps)
        elapsed = now - self._last_time
        if elapsed > 0 and samples > self._last_samples:
            self._samples_per_s = (samples - self._last_samples) / elapsed
        self._last_time, self._last_samples = now, samples
        self.next_due = now + self.every_s
        global_step = shape.global_step(epoch, done_steps)
        start_step = shape.global_step(shape.start_epoch, shape.start_step)
        total_steps = shape.epochs * shape.steps_per_epoch
        done_here = global_step - start_step
        eta = (now - self._started) / done_here * (total_steps - global_step) if done_here else None
        finished_epoch = done_steps >= shape.steps_per_epoch
        self._deliver_commits()  # first, so the snapshot names the newest checkpoint
        snapshot = Snapshot(
            time=self.wall_clock(),
            job=shape.job,
            epoch=epoch + 1,
            epochs=shape.epochs,
            step=done_steps,
            steps=shape.steps_per_epoch,
            global_step=global_step,
            samples=samples - self._start_samples,
            samples_per_s=round(self._samples_per_s, 1),
            loss=loss,
            loss_is_global=loss_is_global,
            learning_rate=self.learning_rate(),
            eta_s=round(eta, 1) if eta is not None else None,
            world_size=shape.world_size,
            resumed=shape.resumed,
            restarts=shape.restarts,
            last_checkpoint=self._last_checkpoint,
            done=finished_epoch and epoch + 1 >= shape.epochs,
        )
        self._snapshot = snapshot
        step_losses = [StepLoss(step, value) for step, value in losses]
        self._each_sink(lambda sink: sink.report(snapshot, step_losses))

    def _deliver_commits(self) -> bool:
        """Hands the sinks the checkpoints committed since the last call; were there any?"""
        records = self.commits()
        for record in records:
            entry = record.entry
            saved = CheckpointSaved(
                epoch=entry.epochs_completed,
                step=entry.step_in_epoch,
                global_step=self.shape.global_step(entry.epochs_completed, entry.step_in_epoch),
                seconds=record.seconds,
                bytes=entry.size,
                time=record.time,
            )
            self._last_checkpoint = saved
            self._each_sink(lambda sink, saved=saved: sink.checkpoint_saved(saved))
        return bool(records)

    def _each_sink(self, call: Callable[[ReportSink], None]) -> None:
        for sink in list(self.sinks):
            try:
                call(sink)
            except Exception as error:
                LOG.warning(
                    "reporting: %s failed (%s: %s); it reports nothing more in this run",
                    type(sink).__name__,
                    type(error).__name__,
                    error,
                )
                self.sinks.remove(sink)
                # Already failing: its first error is the one worth saying.
                with contextlib.suppress(Exception):
                    sink.close()


def restarts(environ: Mapping[str, str]) -> int:
    """torchrun's restarts of this worker group (its own count; a pod the operator recreated
    starts again at 0)."""
    try:
        return int(environ.get(RESTART_COUNT_ENV, "0") or 0)
    except ValueError:
        return 0


def job_name(environ: Mapping[str, str] = os.environ) -> str:
    return environ.get(JOB_NAME_ENV, "")


def check_environment(environ: Mapping[str, str]) -> None:
    """Every rank checks the reporting variables before training (ValueError naming the
    variable): rank 0 alone refusing would leave the others waiting in a collective."""
    report_every(environ)
    parse_port(environ)
    tensorboard_enabled(environ)


def open_reporter(
    storage: RunStorage,
    shape: RunShape,
    environ: Mapping[str, str],
    *,
    learning_rate: Callable[[], float | None],
    commits: Callable[[], list[CommitRecord]],
) -> ProgressReporter:
    """Rank 0's reporter with every sink the environment asks for: the ``@progress`` line
    always, Prometheus with ``METRICS_PORT``, TensorBoard unless ``TRAINER_TENSORBOARD=0``."""
    sinks: list[ReportSink] = [ProgressLine()]
    try:
        metrics = PrometheusMetrics.from_environment(environ)
        if metrics is not None:
            sinks.append(metrics)
        # Steps past the start were written by a process that died after its last checkpoint
        # (or before its first): TensorBoard drops them, so the run stays one curve.
        started_at = shape.global_step(shape.start_epoch, shape.start_step)
        tensorboard = TensorBoardLog.open(storage, started_at, environ=environ)
        if tensorboard is not None:
            sinks.append(tensorboard)
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    return ProgressReporter(
        shape,
        sinks,
        every_s=report_every(environ),
        learning_rate=learning_rate,
        commits=commits,
    )
