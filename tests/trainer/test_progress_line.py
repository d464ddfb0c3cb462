"""trainer/progress_line.py writes what readers/progress_report.py reads: the same marker, and
every value of a snapshot back from one log line."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from readers import progress_report
from tests.trainer.reports import JOB, SAVE, SNAPSHOT
from trainer import progress_line
from trainer.progress_line import ProgressLine, progress_text
from trainer.report import Snapshot


def snapshot(**changes: object) -> Snapshot:
    return dataclasses.replace(SNAPSHOT, **{"last_checkpoint": SAVE, **changes})  # type: ignore[arg-type]


def test_the_marker_is_the_same_on_both_sides() -> None:
    assert progress_line.MARKER == progress_report.MARKER


def test_every_value_of_a_snapshot_reads_back_from_its_line() -> None:
    report = progress_report.parse_line(progress_text(snapshot()))
    assert report is not None
    assert (report.epoch, report.epochs, report.step, report.steps) == (2, 5, 30, 100)
    assert (report.loss, report.samples_per_s, report.eta_s) == (0.42, 1234.5, 61.0)
    assert (report.learning_rate, report.world_size, report.restarts) == (0.001, 4, 1)
    assert report.resumed and not report.done and report.job == JOB
    assert report.time == pytest.approx(SNAPSHOT.time)
    assert report.checkpoint == progress_report.CheckpointReport(
        epoch=1, step=0, time=SAVE.time, seconds=SAVE.seconds, bytes=SAVE.bytes
    )
    assert report.fraction == pytest.approx(snapshot().fraction)


def test_unknown_values_are_left_out_not_written_as_null() -> None:
    text = progress_text(snapshot(loss=None, eta_s=None, learning_rate=None, last_checkpoint=None))
    assert "null" not in text
    report = progress_report.parse_line(text)
    assert report is not None and report.loss is None and report.checkpoint is None


def test_the_sink_logs_one_line_per_report(caplog: pytest.LogCaptureFixture) -> None:
    sink = ProgressLine()
    with caplog.at_level(logging.INFO, logger="trainer"):
        sink.report(snapshot(), [])
        sink.report(snapshot(step=31), [])
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2 and all(text.startswith("@progress {") for text in lines)
