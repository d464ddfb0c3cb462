"""Per-epoch progress: each rank's loss sum over the epoch (:class:`EpochLoss`), then one
human-readable log line and the same values as a JSON line in the run's ``metrics.jsonl``
(rank 0 only, through the run's storage: ``trainer.storage``), which ``python -m trainer.plot``
reads. Each row also says which checkpoints were saved during its epoch (``saves``) and whether
it is the first row of a process that resumed from a checkpoint (``resumed``: a restart); rows
written before those fields existed read as no saves and no restart."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from trainer.storage import StorageRoot, open_storage

LOG = logging.getLogger("trainer")
METRICS_NAME = "metrics.jsonl"


class EpochLoss:
    """This rank's sample-weighted loss sum over (part of) an epoch.

    A step only appends its detached loss (no kernel, no allocation beyond the list slot, no
    host sync on a GPU); the sum is folded on the host when it is read (epoch end, checkpoint)
    with one transfer for all pending steps. The fold adds ``loss * batch`` in float64 in step
    order, exactly what a per-step ``float64_sum.add_(loss, alpha=batch)`` computed, so the
    metrics of an interrupted and an uninterrupted run stay equal to the bit."""

    def __init__(self, carried: float = 0.0, *, first_step: int | None = None) -> None:
        """``first_step``: the run's global step before this epoch's first, when the progress
        reports want each step's loss (rank 0); None keeps no per-step record."""
        self._sum = carried
        self._losses: list[torch.Tensor] = []
        self._sizes: list[int] = []
        self._first_step = first_step
        self._steps: list[int] | None = [] if first_step is not None else None
        # Folded per-step losses not yet drained: (global step, sample-weighted mean, samples).
        self._folded: list[tuple[int, float, int]] = []

    def add(self, loss: torch.Tensor, batch: int, step: int = 0) -> None:
        """``step``: the 0-based step in the epoch the loss belongs to (several micro-batches
        of one step each add theirs)."""
        self._losses.append(loss.detach())
        self._sizes.append(batch)
        if self._steps is not None:
            self._steps.append(step)

    def total(self) -> float:
        if self._losses:
            values = torch.stack(self._losses).to("cpu", torch.float64).tolist()
            for value, size in zip(values, self._sizes, strict=True):
                self._sum += value * size
            if self._steps is not None:
                self._fold_steps(values)
            self._losses.clear()
            self._sizes.clear()
        return self._sum

    def _fold_steps(self, values: list[float]) -> None:
        assert self._steps is not None and self._first_step is not None
        for value, size, step in zip(values, self._sizes, self._steps, strict=True):
            global_step = self._first_step + step + 1
            if self._folded and self._folded[-1][0] == global_step:
                _, weighted, samples = self._folded[-1]
                self._folded[-1] = (global_step, weighted + value * size, samples + size)
            else:
                self._folded.append((global_step, value * size, size))
        self._steps.clear()

    def drain_steps(self) -> list[tuple[int, float]]:
        """Each step's loss since the last drain, ``(global step, mean loss)``, in order.
        Called between steps, so every step is complete. Empty without ``first_step``."""
        self.total()
        drained = [(step, weighted / max(samples, 1)) for step, weighted, samples in self._folded]
        self._folded = []
        return drained


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int  # 1-based: epochs completed after this one
    total_epochs: int
    loss: float
    samples: int
    seconds: float
    samples_per_s: float
    eta_s: float
    lr: float | None
    # The checkpoints saved during this epoch, each as the number of the epoch's steps done when
    # it was taken (1 .. steps per epoch; the epoch-end save is the epoch's step count), in the
    # order taken. Empty: none (and every row written before this field existed).
    saves: tuple[int, ...] = ()
    # The first row written by a process that started from a checkpoint (a restart after a
    # failure, a preemption or a stop), not from scratch or a warm start.
    resumed: bool = False


class MetricsLog:
    def __init__(self, root: StorageRoot, total_epochs: int, start_epoch: int) -> None:
        self.storage = open_storage(root)
        self.total_epochs = total_epochs
        self._start_epoch = start_epoch
        self._started = time.perf_counter()

    def record(
        self,
        epoch: int,
        loss: float,
        samples: int,
        seconds: float,
        lr: float | None,
        *,
        saves: Sequence[int] = (),
        resumed: bool = False,
    ) -> EpochMetrics:
        """Log epoch ``epoch`` (1-based: the epochs completed after it) and append its row.
        ``saves``: the checkpoints taken during this epoch, each as the steps of the epoch done
        when taken (see :class:`EpochMetrics`); ``resumed``: this is the first row of a process
        that resumed from a checkpoint."""
        # ETA from the mean epoch time of this process, so a restart does not skew it.
        done_here = epoch - self._start_epoch
        elapsed = time.perf_counter() - self._started
        eta = elapsed / max(done_here, 1) * (self.total_epochs - epoch)
        metrics = EpochMetrics(
            epoch=epoch,
            total_epochs=self.total_epochs,
            loss=loss,
            samples=samples,
            seconds=round(seconds, 6),
            samples_per_s=round(samples / seconds, 1) if seconds > 0 else 0.0,
            eta_s=round(eta, 1),
            lr=lr,
            saves=tuple(int(step) for step in saves),
            resumed=bool(resumed),
        )
        LOG.info(
            "epoch %d/%d  loss %.6f  %.0f samples/s  ETA %s",
            epoch,
            self.total_epochs,
            loss,
            metrics.samples_per_s,
            _format_duration(eta),
        )
        self.storage.append_line(METRICS_NAME, json.dumps(asdict(metrics)))
        return metrics


def rewind(root: StorageRoot, epochs_completed: int) -> int:
    """Make the run's metrics.jsonl end at the checkpoint it resumes from: rows for later epochs
    were trained after that checkpoint by a process that died, and are trained again now.
    Called by rank 0 before training; the object is replaced atomically. Returns rows dropped.
    The rows kept are kept whole, ``saves`` and ``resumed`` included (a row is never edited)."""
    storage = open_storage(root)
    try:
        rows = read_metrics(storage)
    except FileNotFoundError:
        return 0
    latest: dict[int, dict[str, Any]] = {}
    for row in rows:
        if int(row["epoch"]) <= epochs_completed:
            latest[int(row["epoch"])] = row  # a duplicate from an older file version: keep last
    kept = [latest[epoch] for epoch in sorted(latest)]
    if len(kept) == len(rows):
        return 0
    encoded = "".join(json.dumps(row) + "\n" for row in kept).encode()
    storage.write(METRICS_NAME, lambda file: file.write(encoded))
    return len(rows) - len(kept)


def _format_duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


def read_metrics(root: StorageRoot) -> list[dict[str, Any]]:
    """The run's epoch rows in the order written; FileNotFoundError when it has none yet."""
    data = open_storage(root).read_bytes(METRICS_NAME)
    rows = []
    for line in data.decode(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill mid-write; the epoch is trained again
    return rows
