"""The training's progress as rank 0 reports it: the last ``@progress`` line of its log (the
trainer's trainer/progress_line.py writes one every report; a user's own script prints the same,
docs/reference/progress.md), read back and put in words for `make status` and `pulumi up`'s
wait.

The format's schema lives here (``ProgressReport``): every key but ``epoch`` and ``epochs`` is
optional, unknown keys are ignored (a newer trainer's), and a line that does not parse is
skipped, so a script that prints a wrong line loses its progress, never the status.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MARKER = "@progress"  # the trainer's trainer/progress_line.py MARKER; a test holds them equal
# How much of rank 0's log is searched for its last report: the trainer writes one every 15
# seconds (TRAINER_REPORT_EVERY_S), so it is in the last few lines unless a script logs a lot.
SCAN_LINES = 400
FORMAT_DOC = "docs/reference/progress.md"


class _Report(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class CheckpointReport(_Report):
    """The newest committed checkpoint: its position is (epochs completed, steps into the next
    epoch), as the trainer names checkpoints."""

    epoch: int = Field(ge=0)
    step: int = Field(0, ge=0)
    time: float | None = None  # unix time of the commit
    seconds: float | None = Field(None, ge=0)
    bytes: int | None = Field(None, ge=0)


class ProgressReport(_Report):
    epoch: int = Field(ge=0)  # 1-based: the epoch in progress, or the one just finished
    epochs: int = Field(ge=1)
    step: int | None = Field(None, ge=0)  # steps done in `epoch`; without it the epoch is done
    steps: int | None = Field(None, ge=1)
    loss: float | None = None
    samples_per_s: float | None = Field(None, ge=0)
    eta_s: float | None = Field(None, ge=0)
    learning_rate: float | None = None
    time: float | None = None  # unix time of the report
    checkpoint: CheckpointReport | None = None
    done: bool = False
    restarts: int | None = Field(None, ge=0)
    resumed: bool | None = None
    world_size: int | None = Field(None, ge=1)
    job: str | None = None

    @property
    def fraction(self) -> float:
        """Share of the run done, 0..1."""
        if self.done:
            return 1.0
        if self.step is not None and self.steps:
            done = (self.epoch - 1) + min(self.step, self.steps) / self.steps
        else:
            done = self.epoch
        return max(0.0, min(1.0, done / self.epochs))


def parse_line(line: str) -> ProgressReport | None:
    """The report on a log line (the marker anywhere in it: after a logging prefix too)."""
    at = line.find(MARKER + " ")
    if at < 0:
        return None
    try:
        return ProgressReport.model_validate(json.loads(line[at + len(MARKER) + 1 :]))
    except (ValueError, ValidationError):
        return None


def last_report(lines: Iterable[str]) -> ProgressReport | None:
    report = None
    for line in lines:
        report = parse_line(line) or report
    return report


def duration(seconds: float) -> str:
    """`2h05m`, `4m10s`, `12s`."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _checkpoint_words(checkpoint: CheckpointReport, now: float) -> str:
    where = (
        f"after epoch {checkpoint.epoch}"
        if checkpoint.step == 0
        else f"epoch {checkpoint.epoch + 1} step {checkpoint.step}"
    )
    if checkpoint.time is not None:
        where += f", {duration(now - checkpoint.time)} ago"
    return f"last checkpoint {where}"


def summary(report: ProgressReport, now: float | None = None) -> str:
    """One line: epoch and step of the total, percent, samples per second, loss, ETA, and the
    newest checkpoint's position and age; for a finished run, its final figures."""
    now = time.time() if now is None else now
    if report.done:
        parts = [f"finished {report.epochs}/{report.epochs} epochs"]
    else:
        where = f"epoch {report.epoch}/{report.epochs}"
        if report.step is not None and report.steps:
            where += f" step {report.step}/{report.steps}"
        parts = [f"{where} ({report.fraction:.0%})"]
    if report.samples_per_s is not None:
        parts.append(f"{report.samples_per_s:,.0f} samples/s")
    if report.loss is not None:
        parts.append(f"loss {report.loss:.4g}")
    if report.eta_s is not None and not report.done:
        parts.append(f"ETA {duration(report.eta_s)}")
    line = ", ".join(parts)
    if report.checkpoint is not None:
        line += f"; {_checkpoint_words(report.checkpoint, now)}"
    if report.time is not None and now - report.time > 120 and not report.done:
        stamp = datetime.fromtimestamp(report.time, UTC).strftime("%H:%M:%S UTC")
        line += f" (reported at {stamp}, {duration(now - report.time)} ago)"
    return line


def no_report(scanned: int = SCAN_LINES) -> str:
    return (
        f"rank 0 reports no progress (no {MARKER} line in the last {scanned} lines of its log; "
        f"the format: {FORMAT_DOC})"
    )
