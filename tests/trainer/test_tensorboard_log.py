"""trainer/tensorboard_log.py: the event files as TensorBoard's own reader reads them back (every
step once, with its value; one curve across a resume), written in place on a directory and
uploaded to object storage, and the switch that turns them off."""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.tensorboard import curves
from tests.support.waiting import wait_until
from trainer.report import CheckpointSaved, Snapshot, StepLoss
from trainer.storage import RunStorage, Sink, Written, open_storage
from trainer.storage.file import FileStorage
from trainer.tensorboard_log import DIRECTORY, ENABLE_ENV, TensorBoardLog

START = time.time()


def snapshot(
    global_step: int,
    *,
    loss: float | None = 0.5,
    loss_is_global: bool = False,
    learning_rate: float | None = 0.1,
    samples_per_s: float = 1000.0,
) -> Snapshot:
    return Snapshot(
        time=START + global_step,
        job="",
        epoch=1,
        epochs=1,
        step=global_step,
        steps=100,
        global_step=global_step,
        samples=global_step * 32,
        samples_per_s=samples_per_s,
        loss=loss,
        loss_is_global=loss_is_global,
        learning_rate=learning_rate,
        eta_s=None,
        world_size=2,
        resumed=False,
        restarts=0,
        last_checkpoint=None,
        done=False,
    )


def losses(steps: range, value: Callable[[int], float]) -> list[StepLoss]:
    return [StepLoss(step, value(step)) for step in steps]


def saved(global_step: int, seconds: float = 0.25, size: int = 4096) -> CheckpointSaved:
    return CheckpointSaved(
        epoch=0, step=global_step, global_step=global_step, seconds=seconds, bytes=size, time=START
    )


def opened(storage: RunStorage, resumed_global_step: int | None) -> TensorBoardLog:
    log = TensorBoardLog.open(storage, resumed_global_step, environ={})
    assert log is not None
    return log


def event_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("events.out.tfevents.*"))


def test_every_step_and_figure_is_read_back_by_tensorboard_at_its_global_step(
    tmp_path: Path,
) -> None:
    log = opened(open_storage(str(tmp_path)), None)
    log.report(snapshot(3), losses(range(1, 4), lambda step: step / 4))
    log.checkpoint_saved(saved(3, seconds=0.5, size=4096))
    end = snapshot(4, loss=0.75, loss_is_global=True, learning_rate=0.05, samples_per_s=2000.0)
    log.report(end, losses(range(4, 5), lambda step: step / 4))
    log.report(end, [])  # the reporter's last report at the same step adds nothing
    log.close()
    log.close()  # a second close does nothing

    assert len(event_files(tmp_path / DIRECTORY)) == 1
    assert curves(tmp_path / DIRECTORY) == {
        "loss/step": [(1, 0.25), (2, 0.5), (3, 0.75), (4, 1.0)],
        "loss/epoch": [(4, 0.75)],
        "learning_rate": [(3, pytest.approx(0.1)), (4, pytest.approx(0.05))],
        "samples_per_s": [(3, 1000.0), (4, 2000.0)],
        "checkpoint/seconds": [(3, 0.5)],
        "checkpoint/bytes": [(3, 4096.0)],
    }
    with pytest.raises(RuntimeError, match="after close"):
        log.report(end, [])


def test_a_steps_wall_time_is_spread_over_its_reports_interval(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = opened(open_storage(str(tmp_path)), None)
    # Ten seconds after the sink opened, however long after the module's START that was.
    reported = dataclasses.replace(snapshot(10), time=time.time() + 10)
    log.report(reported, losses(range(1, 11), float))
    log.close()
    accumulator = EventAccumulator(str(tmp_path / DIRECTORY), size_guidance={"scalars": 0})
    accumulator.Reload()
    times = [event.wall_time for event in accumulator.Scalars("loss/step")]
    assert times == sorted(times) and len(set(times)) == 10
    assert times[-1] == pytest.approx(reported.time)


@pytest.mark.parametrize("killed_mid_write", [False, True])
def test_a_resumed_run_is_one_curve_each_step_once_with_the_resumed_value(
    tmp_path: Path, killed_mid_write: bool
) -> None:
    """The first process checkpoints at step 5, trains to step 8 and dies; the second resumes
    from step 5 and trains steps 6 and 7 again: TensorBoard's reader drops the first's 6 to 8."""
    storage = open_storage(str(tmp_path))
    first = opened(storage, None)
    first.report(snapshot(5), losses(range(1, 6), lambda step: step + 0.5))
    first.checkpoint_saved(saved(5))
    first.report(snapshot(8, learning_rate=0.2), losses(range(6, 9), lambda step: step + 0.5))
    first.close()
    if killed_mid_write:  # the dead process's last record cut short
        (dead,) = event_files(tmp_path / DIRECTORY)
        dead.write_bytes(dead.read_bytes()[:-7])

    second = opened(storage, 5)
    second.report(snapshot(7, learning_rate=0.3), losses(range(6, 8), lambda step: step + 100.0))
    second.close()

    assert len(event_files(tmp_path / DIRECTORY)) == 2  # the first process's file is kept
    read = curves(tmp_path / DIRECTORY)
    assert read["loss/step"] == [
        (1, 1.5),
        (2, 2.5),
        (3, 3.5),
        (4, 4.5),
        (5, 5.5),
        (6, 106.0),
        (7, 107.0),
    ]
    assert read["learning_rate"] == [(5, pytest.approx(0.1)), (7, pytest.approx(0.3))]
    assert read["checkpoint/seconds"] == [(5, 0.25)]


def test_a_fresh_start_replaces_an_attempt_that_died_before_its_first_checkpoint(
    tmp_path: Path,
) -> None:
    storage = open_storage(str(tmp_path))
    first = opened(storage, None)
    first.report(snapshot(6), losses(range(1, 7), float))
    first.close()
    second = opened(storage, None)  # no checkpoint to resume from: trained again from step 1
    second.report(snapshot(3), losses(range(1, 4), lambda step: step + 10.0))
    second.close()

    read = curves(tmp_path / DIRECTORY)
    assert read["loss/step"] == [(1, 11.0), (2, 12.0), (3, 13.0)]
    assert read["samples_per_s"] == [(3, 1000.0)]


@pytest.mark.parametrize("value", ["0", "false", "OFF", " off "])
def test_trainer_tensorboard_off_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ENABLE_ENV, value)
    assert TensorBoardLog.open(open_storage(str(tmp_path)), None) is None
    assert not (tmp_path / DIRECTORY).exists()


@pytest.mark.parametrize("value", [None, "", "1", "true", "On"])
def test_trainer_tensorboard_unset_or_on_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(ENABLE_ENV, raising=False)
    else:
        monkeypatch.setenv(ENABLE_ENV, value)
    log = TensorBoardLog.open(open_storage(str(tmp_path)), None)
    assert log is not None
    log.close()
    assert log.location == str(tmp_path / DIRECTORY)
    assert len(event_files(tmp_path / DIRECTORY)) == 1


def test_any_other_value_of_trainer_tensorboard_names_the_variable_and_the_values(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError) as refused:
        TensorBoardLog.open(open_storage(str(tmp_path)), None, environ={ENABLE_ENV: "yes"})
    assert str(refused.value) == (
        "TRAINER_TENSORBOARD='yes': expected 1, true or on (the default: write TensorBoard event "
        "files) or 0, false or off (write none)"
    )
    assert not (tmp_path / DIRECTORY).exists()


def test_a_write_that_fails_is_raised_at_the_next_report_and_at_close(tmp_path: Path) -> None:
    log = opened(open_storage(str(tmp_path)), None)

    def broken(event: Any) -> None:
        raise OSError(28, "No space left on device")

    log._file.write_event = broken  # type: ignore[method-assign]
    log.report(snapshot(1), losses(range(1, 2), float))
    wait_until(lambda: log._failure is not None, "the writer thread to fail", 30, interval=0.02)
    where = re.escape(str(tmp_path / DIRECTORY))
    with pytest.raises(OSError, match=f"writing to {where} failed: .*No space"):
        log.report(snapshot(2), [])
    with pytest.raises(OSError, match="No space"):
        log.close()


# -- object storage: written here, each file uploaded whole ----------------------------------------


@dataclasses.dataclass(frozen=True)
class FlakyStorage(FileStorage):
    """A directory whose first ``failures`` writes fail, as a bucket that cannot be reached."""

    failures: list[int] = dataclasses.field(default_factory=lambda: [1])

    def local_directory(self) -> None:  # type: ignore[override]
        return None  # as object storage

    def write(self, name: str, produce: Callable[[Sink], object], **kwargs: Any) -> Written:
        if self.failures[0] > 0:
            self.failures[0] -= 1
            raise OSError(f"{self.location_of(name)}: 503 Slow Down")
        return super().write(name, produce, **kwargs)


def test_on_object_storage_each_file_is_uploaded_at_each_report_and_rotated_when_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("trainer.tensorboard_log.ROTATE_BYTES", 2000)
    monkeypatch.setenv("TRAINER_SPOOL_DIR", str(tmp_path / "spool"))
    (tmp_path / "spool").mkdir()
    root = FlakyStorage(tmp_path / "root")
    uploaded = tmp_path / "root" / DIRECTORY
    uploaded.mkdir(parents=True)  # a bucket has no folders to make
    with caplog.at_level(logging.INFO, logger="trainer"):
        log = opened(root, None)
        assert log.location == f"{tmp_path / 'root'}/{DIRECTORY}"
        log.report(snapshot(50), losses(range(1, 51), float))  # the upload fails: said once
        wait_until(
            lambda: "failed" in caplog.text, "the failed upload's warning", 30, interval=0.02
        )
        for report in range(2, 5):  # about 2.5 kB of events each: a new file after each
            steps = range(report * 50 - 49, report * 50 + 1)
            log.report(snapshot(report * 50), losses(steps, float))
            wait_until(
                lambda report=report: len(event_files(uploaded)) == report - 1,
                f"the upload after report {report}",
                30,
                interval=0.02,
            )
        log.close()

    said = [record for record in caplog.records if record.name == "trainer"]
    assert [record.levelname for record in said] == ["WARNING", "INFO"]
    assert said[0].getMessage() == (
        f"TensorBoard: uploading to {log.location} failed ({root.location_of(DIRECTORY)}/"
        f"{event_files(uploaded)[0].name}: 503 Slow Down); trying again at each report"
    )
    assert len(event_files(uploaded)) == 4
    assert [step for step, _ in curves(uploaded)["loss/step"]] == list(range(1, 201))
    assert list((tmp_path / "spool").iterdir()) == []  # the local copies are gone


def test_an_s3_run_and_its_resume_are_uploaded_and_copied_back_as_one_curve(
    s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tools.retrieve import copy_event_files

    monkeypatch.setenv("TRAINER_SPOOL_DIR", str(tmp_path / "spool"))
    (tmp_path / "spool").mkdir()
    storage = open_storage(f"s3://{s3_bucket}/runs/a")
    first = opened(storage, None)
    assert first.location == f"s3://{s3_bucket}/runs/a/{DIRECTORY}"
    first.report(snapshot(4), losses(range(1, 5), float))
    said: list[str] = []
    wait_until(
        lambda: len(copy_event_files(storage, tmp_path / "early", said.append)) == 1,
        "the upload at the first report",
        30,
        interval=0.05,
    )
    first.close()
    second = opened(storage, 2)
    second.report(snapshot(3), losses(range(3, 4), lambda step: step + 10.0))
    second.close()

    copied = copy_event_files(storage, tmp_path / "out", said.append)
    assert [path.parent for path in copied] == [tmp_path / "out" / DIRECTORY] * 2
    assert said[-1] == f"s3://{s3_bucket}/runs/a/{DIRECTORY}: 2 TensorBoard event file(s) copied"
    assert curves(tmp_path / "out" / DIRECTORY)["loss/step"] == [(1, 1.0), (2, 2.0), (3, 13.0)]
    assert list((tmp_path / "spool").iterdir()) == []


def test_make_checkpoint_copies_the_event_files_from_the_claim_with_the_checkpoint(
    tmp_path: Path,
) -> None:
    from tests.tools.test_retrieve import OWN_SETTINGS, LocalReader
    from tests.trainer.conftest import fake_state
    from tools.retrieve import copy_run
    from trainer.checkpoint import CheckpointStore

    run = tmp_path / "claim" / "run-b"
    run.mkdir(parents=True)
    CheckpointStore(run).commit(fake_state(1.0, 1), 1, 0)
    log = opened(open_storage(str(run)), None)
    log.report(snapshot(2), losses(range(1, 3), float))
    log.close()

    copy_run(LocalReader(tmp_path / "claim"), OWN_SETTINGS, tmp_path / "out", say=lambda _: None)
    assert curves(tmp_path / "out" / DIRECTORY)["loss/step"] == [(1, 1.0), (2, 2.0)]
