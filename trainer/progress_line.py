"""The ``@progress`` line: each report as one line of rank 0's log, the marker then a JSON
object, which `make status` and `pulumi up`'s wait read back from the pod's log
(readers/progress_report.py parses it; docs/reference/progress.md is the format a user's own
script prints to get the same line).

Why the log: it is what the user's credentials already read for `make status` (``pods/log``),
through the kubelet, so no port is opened to the API server's proxy through the job's
NetworkPolicy, no token is put in a pod, it works the same on a claim or a bucket, and a
finished pod's log still holds its last report. A plain script reports with one ``print``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from trainer.report import CheckpointSaved, Snapshot, StepLoss

LOG = logging.getLogger("trainer")
MARKER = "@progress"


def progress_fields(snapshot: Snapshot) -> dict[str, Any]:
    """The JSON object of a report: the documented keys, None-valued ones left out."""
    checkpoint = snapshot.last_checkpoint
    fields: dict[str, Any] = {
        "time": round(snapshot.time, 3),
        "job": snapshot.job or None,
        "epoch": snapshot.epoch,
        "epochs": snapshot.epochs,
        "step": snapshot.step,
        "steps": snapshot.steps,
        "loss": snapshot.loss,
        "samples_per_s": snapshot.samples_per_s,
        "eta_s": snapshot.eta_s,
        "learning_rate": snapshot.learning_rate,
        "world_size": snapshot.world_size,
        "restarts": snapshot.restarts,
        "resumed": snapshot.resumed,
        "done": snapshot.done,
        "checkpoint": (
            {
                "epoch": checkpoint.epoch,
                "step": checkpoint.step,
                "time": round(checkpoint.time, 3),
                "seconds": round(checkpoint.seconds, 3),
                "bytes": checkpoint.bytes,
            }
            if checkpoint is not None
            else None
        ),
    }
    return {key: value for key, value in fields.items() if value is not None}


def progress_text(snapshot: Snapshot) -> str:
    return f"{MARKER} {json.dumps(progress_fields(snapshot), separators=(',', ':'))}"


class ProgressLine:
    """A ReportSink: one ``@progress`` line per report."""

    def __init__(self, logger: logging.Logger = LOG) -> None:
        self._log = logger

    def report(self, snapshot: Snapshot, losses: Sequence[StepLoss]) -> None:
        self._log.info("%s", progress_text(snapshot))

    def checkpoint_saved(self, saved: CheckpointSaved) -> None:
        """The next report carries it (``checkpoint``)."""

    def close(self) -> None:
        """Nothing is buffered: each line is logged when reported."""
