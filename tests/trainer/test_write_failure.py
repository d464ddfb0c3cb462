"""trainer/write_failure.py: a background write's failure kept and raised once, as the
writers' one error type with its cause, by the caller's next wait."""

from __future__ import annotations

import threading

import pytest

from trainer.checkpoint_schema import CheckpointError
from trainer.write_failure import WriteFailure


def test_nothing_kept_raises_nothing() -> None:
    failure = WriteFailure()
    failure.run(lambda: None)
    failure.raise_if_any()


def test_a_threads_failure_is_raised_once_with_its_cause() -> None:
    failure = WriteFailure()

    def work() -> None:
        raise OSError("disk full")

    thread = threading.Thread(target=failure.run, args=(work,))
    thread.start()
    thread.join()
    with pytest.raises(CheckpointError, match="checkpoint write failed: disk full") as raised:
        failure.raise_if_any()
    assert isinstance(raised.value.__cause__, OSError)
    failure.raise_if_any()  # once: the failure was handed over


def test_a_recorded_reply_is_raised_and_the_latest_failure_wins() -> None:
    failure = WriteFailure()
    failure.record(RuntimeError("first"))
    failure.record(ValueError("writer process: bad shard"))
    with pytest.raises(CheckpointError, match="bad shard") as raised:
        failure.raise_if_any()
    assert isinstance(raised.value.__cause__, ValueError)


def test_even_a_base_exception_in_the_work_is_kept_not_lost() -> None:
    failure = WriteFailure()

    def interrupted() -> None:
        raise KeyboardInterrupt

    failure.run(interrupted)
    with pytest.raises(CheckpointError) as raised:
        failure.raise_if_any()
    assert isinstance(raised.value.__cause__, KeyboardInterrupt)
