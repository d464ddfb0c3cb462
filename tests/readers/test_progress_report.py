"""readers/progress_report.py: rank 0's `@progress` lines read back and put in words. The
trainer's own lines are checked against this schema in tests/trainer/test_progress_line.py."""

from __future__ import annotations

import json

import pytest

from readers.progress_report import (
    MARKER,
    SCAN_LINES,
    CheckpointReport,
    ProgressReport,
    duration,
    last_report,
    no_report,
    parse_line,
    summary,
)

NOW = 1_800_000_000.0


def line(**fields: object) -> str:
    return f"[rank0] 2026-12-07 10:00:00 INFO {MARKER} {json.dumps(fields)}"


def test_a_report_is_found_after_any_logging_prefix_and_the_last_one_wins() -> None:
    lines = [
        "epoch 1/4  loss 0.9",
        line(epoch=1, epochs=4, step=5, steps=10),
        "checkpoint committed: /checkpoints/x",
        line(epoch=2, epochs=4, step=3, steps=10, loss=0.5),
        f"{MARKER} {{not json",  # a line cut short: skipped, the one before stays
        line(epoch=-1, epochs=4),  # invalid values: skipped too
    ]
    report = last_report(lines)
    assert report is not None and (report.epoch, report.step, report.loss) == (2, 3, 0.5)
    assert last_report(["nothing here", "@progressive"]) is None


def test_a_plain_script_needs_only_epoch_and_epochs_and_unknown_keys_are_ignored() -> None:
    report = parse_line(f'{MARKER} {{"epoch": 3, "epochs": 12, "accuracy": 0.9}}')
    assert report == ProgressReport(epoch=3, epochs=12)
    assert report.fraction == 0.25  # without steps the epoch is done
    assert summary(report, NOW) == "epoch 3/12 (25%)"
    assert parse_line(f'{MARKER} {{"epoch": 3}}') is None  # epochs is required


def test_a_running_report_in_words_with_its_checkpoints_position_and_age() -> None:
    report = ProgressReport(
        epoch=4,
        epochs=10,
        step=40,
        steps=100,
        loss=0.123456,
        samples_per_s=1812.4,
        eta_s=130,
        time=NOW - 5,
        checkpoint={"epoch": 3, "step": 0, "time": NOW - 72},
    )
    assert report.fraction == pytest.approx(0.34)
    assert summary(report, NOW) == (
        "epoch 4/10 step 40/100 (34%), 1,812 samples/s, loss 0.1235, ETA 2m10s; "
        "last checkpoint after epoch 3, 1m12s ago"
    )
    mid_epoch = report.model_copy(update={"checkpoint": CheckpointReport(epoch=3, step=20)})
    assert summary(mid_epoch, NOW).endswith("; last checkpoint epoch 4 step 20")


def test_a_finished_run_gives_its_final_figures_and_an_old_report_says_when() -> None:
    done = ProgressReport(epoch=10, epochs=10, step=100, steps=100, loss=0.01, done=True, eta_s=0)
    assert summary(done, NOW) == "finished 10/10 epochs, loss 0.01"
    stale = ProgressReport(epoch=2, epochs=10, time=NOW - 600)
    assert summary(stale, NOW).endswith("(reported at 07:50:00 UTC, 10m00s ago)")


def test_durations_and_the_no_report_line_name_what_to_do() -> None:
    assert [duration(s) for s in (0, 59.6, 61, 3600 * 2 + 300)] == ["0s", "1m00s", "1m01s", "2h05m"]
    said = no_report()
    assert f"no {MARKER} line in the last {SCAN_LINES} lines" in said
    assert "docs/reference/progress.md" in said
