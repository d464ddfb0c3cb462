"""trainer/progress.py: when rank 0 reports and what the sinks get, on a clock the test turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
import torch

from trainer.checkpoint import CheckpointEntry, CommitRecord
from trainer.metrics import EpochLoss, EpochMetrics
from trainer.progress import ProgressReporter, RunShape, report_every, restarts
from trainer.report import CheckpointSaved, Snapshot, StepLoss

SHAPE = RunShape(
    job="ddp",
    epochs=4,
    steps_per_epoch=10,
    dataset_size=100,
    global_batch=10,
    world_size=2,
    start_epoch=1,
    start_step=5,
    resumed=True,
    restarts=1,
)


@dataclass
class Recorder:
    reports: list[tuple[Snapshot, list[StepLoss]]] = field(default_factory=list)
    saved: list[CheckpointSaved] = field(default_factory=list)
    closed: int = 0

    def report(self, snapshot: Snapshot, losses: Sequence[StepLoss]) -> None:
        self.reports.append((snapshot, list(losses)))

    def checkpoint_saved(self, saved: CheckpointSaved) -> None:
        self.saved.append(saved)

    def close(self) -> None:
        self.closed += 1


class Broken(Recorder):
    def report(self, snapshot: Snapshot, losses: Sequence[StepLoss]) -> None:
        raise OSError("disk full")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def entry(epochs: int, step: int, size: int = 4096) -> CheckpointEntry:
    return CheckpointEntry(
        file=f"ckpt-{epochs}-{step}.pt",
        sha256="0" * 64,
        size=size,
        epochs_completed=epochs,
        step_in_epoch=step,
        world_size=2,
        fingerprint="f",
    )


def reporter(
    sinks: list, commits: list[CommitRecord] | None = None
) -> tuple[ProgressReporter, Clock]:
    clock = Clock()
    pending = commits if commits is not None else []

    def take() -> list[CommitRecord]:
        taken = list(pending)
        pending.clear()
        return taken

    made = ProgressReporter(
        SHAPE,
        sinks,
        every_s=15,
        learning_rate=lambda: 0.01,
        commits=take,
        clock=clock,
        wall_clock=lambda: 1_700_000_000.0 + clock.now,
    )
    return made, clock


def losses_of(first_step: int, values: Sequence[float], start: int = 0) -> EpochLoss:
    loss = EpochLoss(first_step=first_step)
    for index, value in enumerate(values):
        loss.add(torch.tensor(value), 10, start + index)
    return loss


def test_a_report_is_due_every_interval_and_counts_every_ranks_samples_since_the_start() -> None:
    sink = Recorder()
    made, clock = reporter([sink])
    assert not made.due()
    clock.now += 15
    assert made.due()
    # Resumed at epoch 1 (0-based) step 5: three steps of epoch 1 trained since, 30 samples.
    made.during_epoch(1, 8, losses_of(10, [1.0, 2.0, 3.0], start=5), samples=30)
    snapshot, losses = sink.reports[0]
    assert (snapshot.epoch, snapshot.step, snapshot.steps, snapshot.epochs) == (2, 8, 10, 4)
    assert snapshot.global_step == 18
    assert snapshot.samples == 30
    assert snapshot.samples_per_s == 2.0  # 30 samples in 15 s
    assert snapshot.loss == pytest.approx(2.0)
    assert not snapshot.loss_is_global
    # 3 steps took 15 s; 40 - 18 = 22 left.
    assert snapshot.eta_s == pytest.approx(110.0)
    assert snapshot.fraction == pytest.approx(18 / 40)
    assert (snapshot.job, snapshot.world_size, snapshot.resumed, snapshot.restarts) == (
        "ddp",
        2,
        True,
        1,
    )
    assert snapshot.learning_rate == 0.01
    assert [(loss.global_step, loss.loss) for loss in losses] == [(16, 1.0), (17, 2.0), (18, 3.0)]
    assert not made.due()  # the next one is an interval later


def test_each_step_s_loss_is_the_mean_of_its_micro_batches_weighted_by_their_samples() -> None:
    loss = EpochLoss(first_step=20)
    loss.add(torch.tensor(1.0), 3, 0)
    loss.add(torch.tensor(2.0), 1, 0)
    assert loss.total() == pytest.approx(5.0)  # a checkpoint's fold keeps the step for the drain
    loss.add(torch.tensor(4.0), 4, 1)
    assert loss.drain_steps() == [(21, pytest.approx(1.25)), (22, pytest.approx(4.0))]
    assert loss.drain_steps() == []
    assert EpochLoss().drain_steps() == []  # without first_step: no per-step record


def test_the_epoch_end_report_carries_the_all_reduced_loss_and_the_last_epoch_is_done() -> None:
    sink = Recorder()
    made, clock = reporter([sink])
    clock.now += 3
    row = EpochMetrics(4, 4, 0.5, 100, 3.0, 33.3, 0.0, 0.01)
    made.epoch_end(3, row, losses_of(30, [0.4]))
    snapshot, _ = sink.reports[-1]
    assert snapshot.loss == 0.5 and snapshot.loss_is_global
    assert snapshot.done and snapshot.fraction == 1.0
    assert snapshot.eta_s == 0.0


def test_commits_reach_every_sink_and_the_next_snapshot_and_the_final_save_at_close() -> None:
    sink = Recorder()
    commits = [CommitRecord(entry(2, 0), 0.25, 1_700_000_050.0)]
    made, clock = reporter([sink], commits)
    clock.now += 15
    made.during_epoch(2, 3, losses_of(20, [1.0]), samples=10)
    assert sink.saved == [CheckpointSaved(2, 0, 20, 0.25, 4096, 1_700_000_050.0)]
    assert sink.reports[-1][0].last_checkpoint == sink.saved[0]
    commits.append(CommitRecord(entry(4, 0, size=8192), 0.5, 1_700_000_060.0))
    made.close()
    final, losses = sink.reports[-1]
    assert final.last_checkpoint is not None and final.last_checkpoint.global_step == 40
    assert losses == []
    assert sink.closed == 1


def test_close_without_a_new_commit_reports_nothing_more() -> None:
    sink = Recorder()
    made, clock = reporter([sink])
    clock.now += 15
    made.during_epoch(1, 6, losses_of(10, [1.0], start=5), samples=10)
    made.close()
    assert len(sink.reports) == 1 and sink.closed == 1


def test_a_failing_sink_is_dropped_and_the_others_go_on(caplog: pytest.LogCaptureFixture) -> None:
    broken, kept = Broken(), Recorder()
    made, clock = reporter([broken, kept])
    for _ in range(2):
        clock.now += 15
        made.during_epoch(1, 6, losses_of(10, [1.0], start=5), samples=10)
    assert len(kept.reports) == 2
    assert broken.closed == 1 and made.sinks == [kept]
    assert "Broken failed (OSError: disk full)" in caplog.text


def test_the_interval_is_checked_with_the_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert report_every({}) == 15.0
    assert report_every({"TRAINER_REPORT_EVERY_S": "2.5"}) == 2.5
    for bad in ("0", "fast", "7200"):
        with pytest.raises(ValueError, match=r"^TRAINER_REPORT_EVERY_S='.*': expected seconds"):
            report_every({"TRAINER_REPORT_EVERY_S": bad})
    assert restarts({"TORCHELASTIC_RESTART_COUNT": "2"}) == 2
    assert restarts({}) == 0
