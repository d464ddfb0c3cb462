"""Per-epoch progress: each rank's loss sum over the epoch (:class:`EpochLoss`), then one
human-readable log line and the same values as a JSON line in the run's ``metrics.jsonl``
(rank 0 only, through the run's storage: ``trainer.storage``), which ``python -m trainer.plot``
reads."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass

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


class MetricsLog:
    def __init__(self, root: StorageRoot, total_epochs: int, start_epoch: int) -> None:
        self.storage = open_storage(root)
        self.total_epochs = total_epochs
        self._start_epoch = start_epoch
        self._started = time.perf_counter()

    def record(
        self, epoch: int, loss: float, samples: int, seconds: float, lr: float | None
    ) -> EpochMetrics:
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
    Called by rank 0 before training; the object is replaced atomically. Returns rows dropped."""
    storage = open_storage(root)
    try:
        rows = read_metrics(storage)
    except FileNotFoundError:
        return 0
    latest: dict[int, dict[str, float]] = {}
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


def read_metrics(root: StorageRoot) -> list[dict[str, float]]:
    """The run's epoch rows in the order written; FileNotFoundError when it has none yet."""
    data = open_storage(root).read_bytes(METRICS_NAME)
    rows = []
    for line in data.decode(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill mid-write; the epoch is trained again
    return rows
