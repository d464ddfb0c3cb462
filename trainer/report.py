"""What the trainer reports while it runs, and the one interface every place it reports to
implements (``ReportSink``): the ``@progress`` line in rank 0's log (``trainer.progress_line``),
Prometheus' /metrics (``trainer.prometheus_metrics``), TensorBoard's event files
(``trainer.tensorboard_log``). ``trainer.progress`` (the ``ProgressReporter``) decides when,
and hands each sink the same values; only rank 0 reports.

Why a snapshot every few seconds rather than a call per step: a step of the tutorial's model
takes about a millisecond on a CPU, so per-step work in a sink (a lock, a string, a host sync
for the loss) would cost more than the 1% the reporting may cost (``make bench``). The loop
counts steps and samples as plain integers; the reporter reads the clock once per step and, when
a report is due (``every_s``), folds the pending losses in one transfer and hands the sinks a
``Snapshot`` and each step's loss since the last one (``StepLoss``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class StepLoss:
    """One optimizer step's loss on rank 0 (the sample-weighted mean of its micro-batches), with
    its global step: ``epoch * steps_per_epoch + step_in_epoch`` (1-based, so the first step of
    a run is 1), which is the same number on any resume of the run."""

    global_step: int
    loss: float


@dataclass(frozen=True)
class CheckpointSaved:
    """A checkpoint committed to the run's storage (the background writer's included)."""

    epoch: int  # epochs completed at the save
    step: int  # steps done in the next epoch (0: an epoch's end)
    global_step: int
    seconds: float  # from the save call to the commit: what the run waited, plus the handover
    bytes: int
    time: float  # unix time of the commit


@dataclass(frozen=True)
class Snapshot:
    """Where the run is, as rank 0 knows it at ``time``.

    ``epoch`` is 1-based: the epoch in progress, or the one just finished (then ``step ==
    steps``); ``done`` once the last epoch finished. ``loss`` is the mean over the current
    epoch so far: rank 0's share mid-epoch, every rank's (all-reduced) at an epoch's end
    (``loss_is_global``). ``samples_per_s`` counts every rank's samples over the last report
    interval; ``eta_s`` extrapolates this process's own pace, so a restart does not skew it."""

    time: float
    job: str  # the job's name (TRAINER_JOB_NAME), "" when run by hand
    epoch: int
    epochs: int
    step: int
    steps: int
    global_step: int  # steps done in the whole run (the resumed ones included)
    samples: int  # samples trained by this process, every rank's
    samples_per_s: float
    loss: float | None
    loss_is_global: bool
    learning_rate: float | None
    eta_s: float | None
    world_size: int
    resumed: bool  # this process continued from a checkpoint
    restarts: int  # torchrun's restarts of this process group (TORCHELASTIC_RESTART_COUNT)
    last_checkpoint: CheckpointSaved | None
    done: bool

    @property
    def fraction(self) -> float:
        """Share of the run's steps done, 0..1."""
        total = self.epochs * self.steps
        return min(1.0, self.global_step / total) if total > 0 else 0.0


class ReportSink(Protocol):
    """Where reports go. Every method runs on rank 0's training thread between steps; a sink
    that does I/O keeps it short (a log line, a queued event) or hands it to its own thread."""

    def report(self, snapshot: Snapshot, losses: Sequence[StepLoss]) -> None:
        """A report is due: ``losses`` are the steps since the previous report, in order."""

    def checkpoint_saved(self, saved: CheckpointSaved) -> None:
        """A checkpoint was committed (called at the report after its commit)."""

    def close(self) -> None:
        """The run ends (finished, stopped or failed): flush what is buffered."""
