"""The asynchronous writer on its own: when a save is inline, handed to the writer process, or
to the thread that stands in for it; that a save's copy is private; that failures surface; and
that every path commits through the store it was given."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

import trainer.async_writer
from tests.trainer.conftest import fake_state, wait_until
from trainer.async_writer import CheckpointWriter
from trainer.checkpoint import (
    SNAPSHOT_NAME,
    CheckpointEntry,
    CheckpointError,
    CheckpointStore,
)
from trainer.checkpoint_schema import EPOCHS_RUN, MODEL_STATE, OPTIMIZER_STATE, TrainingCheckpoint


def test_the_snapshot_is_a_private_copy_taken_before_save_returns(tmp_path: Path) -> None:
    writer = CheckpointWriter(
        CheckpointStore(tmp_path, 2), background_min_bytes=0
    )  # the writer process
    state = fake_state(1.0, 1)
    writer.prepare(state)
    wait_until(writer.writer_ready, "the writer process to start")
    writer.save(state, epochs_completed=1, step_in_epoch=0)
    assert writer.last_mode == "background"
    state[MODEL_STATE]["weight"].fill_(99.0)  # training goes on while the writer works
    writer.close()
    saved = torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)
    assert torch.equal(saved[MODEL_STATE]["weight"], torch.full((4, 3), 1.0))


def test_a_failed_background_write_is_raised_not_lost(tmp_path: Path) -> None:
    writer = CheckpointWriter(CheckpointStore(tmp_path / "not-created", 2), background_min_bytes=0)
    writer.prepare(fake_state(1.0, 1))
    wait_until(writer.writer_ready, "the writer process to start")
    writer.save(fake_state(1.0, 1), epochs_completed=1, step_in_epoch=0)
    assert writer.last_mode == "background"
    with pytest.raises(CheckpointError, match="checkpoint write failed"):
        writer.close()


def test_a_failed_inline_write_is_raised_at_the_save(tmp_path: Path) -> None:
    writer = CheckpointWriter(CheckpointStore(tmp_path / "not-created", 2))
    with pytest.raises(CheckpointError, match="checkpoint write failed"):
        writer.save(fake_state(1.0, 1), epochs_completed=1, step_in_epoch=0)
    writer.close()


def test_small_states_are_written_inline_without_a_writer_process(tmp_path: Path) -> None:
    writer = CheckpointWriter(CheckpointStore(tmp_path, 2))
    writer.prepare(fake_state(0.0, 0))
    for epoch in (1, 2):
        writer.save(fake_state(float(epoch), epoch), epochs_completed=epoch, step_in_epoch=0)
        assert writer.last_mode == "inline"
        assert writer.last_committed is not None
        assert writer.last_committed.epochs_completed == epoch  # committed before save returned
    assert not writer.writer_started
    writer.close()


def test_a_slow_inline_write_moves_later_saves_to_the_writer(tmp_path: Path) -> None:
    # A budget of 0 s: the first inline write is "too slow" by measurement.
    writer = CheckpointWriter(CheckpointStore(tmp_path, 2), inline_budget_s=0.0)
    writer.save(fake_state(1.0, 1), epochs_completed=1, step_in_epoch=0)
    assert writer.last_mode == "inline" and writer.writer_started
    wait_until(writer.writer_ready, "the writer process to start")
    writer.save(fake_state(2.0, 2), epochs_completed=2, step_in_epoch=0)
    assert writer.last_mode == "background"
    writer.close()
    assert torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)[EPOCHS_RUN] == 2


def test_preparing_again_after_the_first_step_stages_the_lazy_optimizer_slots(
    tmp_path: Path,
) -> None:
    # Before the first step an optimizer has no momentum buffers; the trainer prepares again
    # after it, so the first save copies into buffers that already exist.
    writer = CheckpointWriter(CheckpointStore(tmp_path, 2), background_min_bytes=0)
    state = fake_state(1.0, 1)
    state[OPTIMIZER_STATE] = {"state": {}}
    writer.prepare(state)
    state[OPTIMIZER_STATE] = {"state": {0: {"momentum_buffer": torch.ones(4, 3)}}}
    writer.prepare(state)
    staged = writer._staging
    assert staged is not None
    slot = staged[OPTIMIZER_STATE]["state"][0]["momentum_buffer"]
    assert slot.is_shared() and torch.equal(slot, torch.ones(4, 3))
    wait_until(writer.writer_ready, "the writer process to start")
    writer.save(state, epochs_completed=1, step_in_epoch=0)
    assert writer.last_mode == "background"
    again = writer._staging[OPTIMIZER_STATE]["state"][0]["momentum_buffer"]
    assert again.data_ptr() == slot.data_ptr()  # reused, not allocated by the save
    writer.close()
    saved = torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)
    assert torch.equal(saved[OPTIMIZER_STATE]["state"][0]["momentum_buffer"], torch.ones(4, 3))


class RecordingStore(CheckpointStore):
    """The real store, remembering which thread each commit ran on and whether it bypassed
    the page cache."""

    def __init__(self, directory: Path, keep: int) -> None:
        super().__init__(directory, keep)
        object.__setattr__(self, "commits", [])

    def commit(
        self, state: Mapping[str, Any], epochs: int, step: int, *, direct_io: bool = False
    ) -> CheckpointEntry:
        self.commits.append((epochs, step, threading.current_thread().name, direct_io))
        return super().commit(state, epochs, step, direct_io=direct_io)


def test_without_shared_memory_a_thread_commits_through_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_shared_memory(_value: Any) -> None:
        raise OSError("No space left on device (a 64 MB /dev/shm)")

    monkeypatch.setattr(trainer.async_writer, "move_to_shared_memory", no_shared_memory)
    store = RecordingStore(tmp_path, 2)
    writer = CheckpointWriter(store, background_min_bytes=0)
    writer.prepare(fake_state(0.0, 0))  # starts the writer process, then cannot stage for it
    assert not writer.writer_started, "the writer process should have been let go"
    assert writer.writer_ready()  # the thread stands in at once
    state = fake_state(1.0, 1)
    writer.save(state, epochs_completed=1, step_in_epoch=3)
    assert writer.last_mode == "background"
    state[MODEL_STATE]["weight"].fill_(99.0)  # the thread writes its own copy
    writer.save(fake_state(2.0, 2), epochs_completed=2, step_in_epoch=0, final=True)
    assert writer.last_mode == "inline"
    writer.close()
    # In the background past the page cache; the final save inline, through it.
    assert store.commits == [(1, 3, "checkpoint-writer", True), (2, 0, "MainThread", False)]
    assert [(e.epochs_completed, e.step_in_epoch) for e in store.manifest()] == [
        (1, 3),
        (2, 0),
    ]
    first = TrainingCheckpoint.from_state(
        torch.load(tmp_path / "checkpoint-e000001-s000003.pt", weights_only=True)
    )
    assert torch.equal(first.model_state["weight"], torch.full((4, 3), 1.0))
    assert writer.last_committed == store.manifest()[-1]


def test_closing_with_the_writers_ready_unread_ends_it_cleanly(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A run whose saves all stayed inline after the writer started (the final save is inline)
    never reads its "ready". Closing the pipe over that unread message used to reach the writer
    as a connection reset: a ConnectionResetError traceback in the middle of `make bench`."""
    writer = CheckpointWriter(CheckpointStore(tmp_path, 2), background_min_bytes=0)
    writer.prepare(fake_state(1.0, 1))  # a large state for this writer: it starts at once
    assert writer._conn.poll(120), "the writer never said it was ready"  # there, unread
    process = writer._process
    writer.save(fake_state(1.0, 1), epochs_completed=1, step_in_epoch=0, final=True)
    writer.close()
    assert process.exitcode == 0
    assert "Traceback" not in capfd.readouterr().err


def test_a_stop_signal_while_the_writer_starts_does_not_kill_it(tmp_path: Path) -> None:
    """torchrun signals the trainer's whole process group, the writer's included; the writer
    must outlive a SIGTERM that arrives while it is still importing torch."""
    writer = CheckpointWriter(CheckpointStore(tmp_path, 2), background_min_bytes=0)
    writer.prepare(fake_state(1.0, 1))
    process = writer._process
    # Once trainer/writer-python.sh has exec'd the interpreter (a shell's first instant after
    # the fork is the one unprotected moment), and seconds before its imports are done.
    interpreter = os.path.realpath(sys.executable)
    wait_until(lambda: psutil.Process(process.pid).exe() == interpreter, "the interpreter")
    os.kill(process.pid, signal.SIGTERM)
    wait_until(writer.writer_ready, "the writer process to start")
    assert writer.writer_started, "the writer process died; a thread stands in for it"
    writer.save(fake_state(2.0, 2), epochs_completed=2, step_in_epoch=0)
    assert writer.last_mode == "background"
    writer.close()
    assert process.exitcode == 0
    assert torch.load(tmp_path / SNAPSHOT_NAME, weights_only=True)[EPOCHS_RUN] == 2
