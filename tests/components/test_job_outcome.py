"""components/job_outcome.py: how long `pulumi up` waits for a job to run
(job.runningTimeoutSeconds) and what it says when the job's pods never run, such as pods no node
may take. The watch itself against a real API server is the real-engine suite's
(tests/e2e/test_job_outcome.py)."""

from __future__ import annotations

from typing import Any

import pytest

from components import job_outcome
from components.job_outcome import JobOutcome, JobOutcomeError, WaitTarget, duration
from readers.job_state import job_state
from readers.job_watch import WaitTimeoutError
from settings.stack import RUNNING_TIMEOUT_SECONDS, parse_settings

JOB = "digits"
UNTOLERATED = (
    "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had "
    "untolerated taint {example.com/pool: digits}. preemption: 0/2 nodes are available: 2 "
    "Preemption is not helpful for scheduling."
)


def unschedulable(replica: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{JOB}-{replica}-0",
            "namespace": "default",
            "labels": {
                "training.kubeflow.org/replica-type": replica,
                "training.kubeflow.org/replica-index": "0",
            },
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": UNTOLERATED,
                }
            ],
        },
    }


class PendingForEver:
    """A watch of a job whose pods no node takes: the wait times out."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def wait(self, until: Any, *, timeout: float | None, **_: Any) -> Any:
        self.timeouts.append(timeout)
        created = {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}
        manifest = {
            "kind": "PyTorchJob",
            "metadata": {"name": JOB, "namespace": "default"},
            "status": {"conditions": [created]},
        }
        state = job_state(manifest, [unschedulable("master"), unschedulable("worker")])
        assert not until(state)  # pods that cannot be placed are not pods that cannot start
        raise WaitTimeoutError("gave up", state)


def test_the_running_timeout_is_the_stacks_and_thirty_minutes_by_default() -> None:
    settings = parse_settings({"image": {"repository": "r.example.com/t"}})
    assert settings.job.running_timeout_seconds == RUNNING_TIMEOUT_SECONDS == 1800
    short = parse_settings(
        {"image": {"repository": "r.example.com/t"}, "job": {"runningTimeoutSeconds": "90"}}
    )
    assert short.job.running_timeout_seconds == 90
    assert (duration(1800), duration(60), duration(90)) == ("30 minutes", "1 minute", "90 seconds")


def test_pods_no_node_takes_fail_up_after_the_timeout_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watch = PendingForEver()
    monkeypatch.setattr(job_outcome.JobWatch, "connect", lambda *args: watch)
    target = WaitTarget(
        namespace="default",
        job=JOB,
        kube_context=None,
        wait_for="running",
        stack="digits",
        running_timeout_seconds=90,
    )
    outcome = JobOutcome("training-job", target)

    with pytest.raises(JobOutcomeError) as failed:
        outcome.watch("urn:job", True, lambda level, message: None)

    assert watch.timeouts == [90]
    lines = str(failed.value).splitlines()
    assert lines[0] == (
        f"PyTorchJob default/{JOB} did not reach Running within 90 seconds (job.waitFor: "
        "running, job.runningTimeoutSeconds); it is Created:"
    )
    assert "Pending (Unschedulable)" in lines[1] and "untolerated taint" in lines[1]
    assert "make status STACK=digits" in lines[-1]
