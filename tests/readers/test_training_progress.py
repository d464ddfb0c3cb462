"""readers/job_watch.py's TrainingProgress, what `pulumi up`'s wait says of the training: each
new report once, and that a script reports none only once it has had time to."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from readers import job_watch
from readers.job_state import job_state
from readers.job_watch import NO_REPORT_GRACE_SECONDS, TrainingProgress
from readers.progress_report import ProgressReport

RUNNING = job_state({"metadata": {"name": "ddp"}, "status": {"conditions": []}}, [])
SUCCEEDED = job_state(
    {
        "metadata": {"name": "ddp"},
        "status": {
            "conditions": [
                {
                    "type": "Succeeded",
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        },
    },
    [],
)


@dataclass
class Rank0Log:
    """What the API server would serve of rank 0's log, in turn: a report, False (a log
    without one) or True (no log to read)."""

    found: list[ProgressReport | bool]
    name: str = "ddp"
    asked: list[str] = field(default_factory=list)

    def rank0_progress(self, state: object, rank0: str) -> ProgressReport | bool:
        self.asked.append(rank0)
        return self.found.pop(0)


def test_each_new_report_is_said_once_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    first = ProgressReport(epoch=1, epochs=4, step=5, steps=10)
    later = ProgressReport(epoch=2, epochs=4, step=1, steps=10)
    log = Rank0Log([first, first, later])
    said: list[str] = []
    watch = TrainingProgress(log, "ddp-master-0", said.append)  # type: ignore[arg-type]
    for _ in range(3):
        watch(RUNNING)
    assert said == ["ddp: epoch 1/4 step 5/10 (12%)", "ddp: epoch 2/4 step 1/10 (28%)"]
    assert log.asked == ["ddp-master-0"] * 3


def test_no_report_is_said_after_the_grace_or_at_the_end_and_only_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(job_watch.time, "monotonic", lambda: now[0])
    said: list[str] = []
    watch = TrainingProgress(Rank0Log([True, False, False, False]), "m", said.append)  # type: ignore[arg-type]
    watch(RUNNING)  # no log yet: nothing to say
    watch(RUNNING)  # a log without a report: the script may still be starting
    assert said == []
    now[0] += NO_REPORT_GRACE_SECONDS
    watch(RUNNING)
    assert len(said) == 1 and "rank 0 reports no progress" in said[0]
    watch(RUNNING)
    assert len(said) == 1

    ended: list[str] = []
    TrainingProgress(Rank0Log([False]), "m", ended.append)(SUCCEEDED)  # type: ignore[arg-type]
    assert len(ended) == 1 and "reports no progress" in ended[0]
