"""trainer/launch.py: which exit code a pod's torchrun ends with when workers failed."""

from __future__ import annotations

from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from trainer.cli import EXIT_PEER_LOST
from trainer.launch import failure_lines


def failed(tmp_path: Path, *ranks: tuple[int, int, int]) -> ChildFailedError:
    """(rank, exit code, timestamp) per failed worker; no error files, as after a plain exit."""
    failures = {}
    for rank, exitcode, timestamp in ranks:
        failure = ProcessFailure(rank, 1000 + rank, exitcode, str(tmp_path / f"error-{rank}"))
        failure.timestamp = timestamp
        failures[rank] = failure
    return ChildFailedError("trainer", failures)


def test_a_rank_that_lost_its_peer_yields_to_the_rank_that_failed(tmp_path: Path) -> None:
    """torchrun's first failure goes by whole seconds: rank 0's symptom may come first."""
    lines, code = failure_lines(failed(tmp_path, (0, EXIT_PEER_LOST, 10), (1, 1, 11)))
    assert code == 1
    assert lines == [
        f"trainer.launch: trainer rank 0 exited with code {EXIT_PEER_LOST}",
        "trainer.launch: trainer rank 1 exited with code 1",
    ]


def test_only_lost_peers_keep_the_code_that_recreates_the_pod(tmp_path: Path) -> None:
    _, code = failure_lines(failed(tmp_path, (0, EXIT_PEER_LOST, 10), (1, EXIT_PEER_LOST, 10)))
    assert code == EXIT_PEER_LOST


def test_otherwise_the_first_failure_decides_and_a_signal_is_128_plus_it(tmp_path: Path) -> None:
    _, code = failure_lines(failed(tmp_path, (0, 2, 12), (1, -9, 11)))
    assert code == 137
