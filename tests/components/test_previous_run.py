"""components/previous_run.py: how the wait for the previous run reads, reports and gives up.
The reads themselves (the JobSet and the pods on a real API server) are exercised by the TrainJob
half of tests/e2e/test_stack_lifecycle.py, which replaces a TrainJob and makes one again right
after a destroy."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from components.previous_run import (
    DRAIN_TIMEOUT_SECONDS,
    PROGRESS_SECONDS,
    PreviousRun,
    PreviousRunError,
)

PREVIOUS = PreviousRun(namespace="team", name="ddp", kind="TrainJob", kube_context=None)


class Clock:
    """Time that passes only when the wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def reads(*answers: list[str]) -> Callable[[], list[str]]:
    """Each call returns the next answer; the last one for ever after."""
    remaining = list(answers)

    def read() -> list[str]:
        return remaining.pop(0) if len(remaining) > 1 else remaining[0]

    return read


def test_nothing_left_returns_without_waiting_or_saying_anything() -> None:
    clock, said = Clock(), []
    PREVIOUS.wait_gone(reads([]), said.append, clock=clock, sleep=clock.sleep)
    assert clock.now == 0 and said == []


def test_waits_until_the_old_jobset_and_pods_are_gone_and_says_what_it_waits_for() -> None:
    clock, said = Clock(), []
    left = ["jobsets/ddp", "pods/ddp-node-0-0-abcde"]
    PREVIOUS.wait_gone(
        reads(left, left, ["pods/ddp-node-0-0-abcde"], []),
        said.append,
        clock=clock,
        sleep=clock.sleep,
    )
    assert clock.now == 3
    # Said once at the start, not on every poll.
    assert said == [
        "TrainJob team/ddp: waiting for the previous run to be gone before creating the new one "
        "(jobsets/ddp, pods/ddp-node-0-0-abcde)"
    ]


def test_progress_is_repeated_every_half_minute() -> None:
    clock, said = Clock(), []
    answers = [["pods/p"]] * int(PROGRESS_SECONDS * 2 + 1) + [[]]
    PREVIOUS.wait_gone(reads(*answers), said.append, clock=clock, sleep=clock.sleep)
    assert len(said) == 3


def test_gives_up_after_the_timeout_naming_what_is_left_and_what_to_do() -> None:
    clock = Clock()
    with pytest.raises(PreviousRunError) as raised:
        PREVIOUS.wait_gone(
            reads(["pods/ddp-node-0-1-xyz"]), [].append, clock=clock, sleep=clock.sleep
        )
    assert clock.now == DRAIN_TIMEOUT_SECONDS
    message = str(raised.value)
    assert message.startswith("TrainJob team/ddp: the previous TrainJob of this name was deleted")
    assert "(pods/ddp-node-0-1-xyz)" in message
    assert "kubectl describe -n team pods/ddp-node-0-1-xyz" in message
    assert message.endswith("run `make up` again")


def test_an_api_server_that_refuses_is_an_error_naming_the_job() -> None:
    from kubernetes.client import ApiException

    def refused() -> list[str]:
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(
        PreviousRunError,
        match=r"^TrainJob team/ddp: cannot read .* \(403 Forbidden\); the job was not created",
    ):
        PREVIOUS.wait_gone(refused, [].append, sleep=lambda _: None)
