"""components/job_wait.py: when the wait for `job.waitFor: running` is over, and when it never
will be, decided from the job and its pods as the API server returns them."""

from __future__ import annotations

from typing import Any

import pytest

from components.job_wait import START_FAILURES, job_outcome, pod_start_failures

# What the kubelet puts in a container's waiting state when the registry refuses the credential
# (containerd 1.6 through the CRI, as the e2e real node reports it).
PULL_MESSAGE = (
    'failed to pull and unpack image "127.0.0.1:5000/trainer@sha256:ab": failed to resolve '
    "reference: pulling from host 127.0.0.1:5000 failed with status code [manifests "
    "sha256:ab]: 401 Unauthorized"
)


def job(*conditions: tuple[str, str], **failed: str) -> dict[str, Any]:
    entries = [{"type": kind, "status": status} for kind, status in conditions]
    if failed:
        entries.append({"type": "Failed", "status": "True", **failed})
    return {"metadata": {"name": "ddp"}, "status": {"conditions": entries}}


def pod(name: str, *, waiting: str | None = None, message: str = "", init: bool = False) -> dict:
    state = {"waiting": {"reason": waiting, "message": message}} if waiting else {"running": {}}
    statuses = [{"name": "pytorch", "state": state}]
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name}, "status": {"phase": "Pending", key: statuses}}


@pytest.mark.parametrize("condition", ["Running", "Succeeded"])
def test_running_or_succeeded_ends_the_wait(condition: str) -> None:
    assert job_outcome(job(("Created", "True"), (condition, "True")), []).reached


def test_a_job_without_true_conditions_or_failing_pods_is_still_waited_for() -> None:
    outcome = job_outcome(
        job(("Created", "True"), ("Running", "False")),
        [pod("ddp-master-0", waiting="ContainerCreating"), pod("ddp-worker-0")],
    )
    assert (outcome.reached, outcome.failure) == (False, None)


def test_no_status_yet_is_still_waited_for() -> None:
    outcome = job_outcome({"metadata": {"name": "ddp"}}, [])
    assert (outcome.reached, outcome.failure) == (False, None)


def test_an_image_the_kubelet_cannot_pull_fails_with_its_message() -> None:
    outcome = job_outcome(
        job(("Created", "True")),
        [
            pod("ddp-master-0", waiting="ImagePullBackOff", message=PULL_MESSAGE),
            pod("ddp-worker-0", waiting="ErrImagePull", message=PULL_MESSAGE),
        ],
    )
    assert not outcome.reached
    assert outcome.failure is not None
    lines = outcome.failure.splitlines()
    assert lines[0] == "job ddp: a pod cannot start:"
    assert lines[1] == f"  pod ddp-master-0 container pytorch: ImagePullBackOff: {PULL_MESSAGE}"
    assert lines[2] == f"  pod ddp-worker-0 container pytorch: ErrImagePull: {PULL_MESSAGE}"


def test_an_init_container_that_cannot_start_counts_too() -> None:
    failures = pod_start_failures(
        [pod("ddp-master-0", waiting="CreateContainerConfigError", message="secret x", init=True)]
    )
    assert failures == ["pod ddp-master-0 container pytorch: CreateContainerConfigError: secret x"]


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing", "CrashLoopBackOff"])
def test_waiting_that_can_end_by_itself_is_no_start_failure(reason: str) -> None:
    assert reason not in START_FAILURES
    assert pod_start_failures([pod("ddp-master-0", waiting=reason)]) == []


def test_a_failed_job_ends_the_wait_with_the_operators_reason() -> None:
    outcome = job_outcome(
        job(
            ("Created", "True"),
            reason="PyTorchJobFailed",
            message="job ddp is failed because 1 Master replica(s) failed.",
        ),
        [],
    )
    assert outcome.failure == (
        "job ddp failed: PyTorchJobFailed: job ddp is failed because 1 Master replica(s) failed."
    )


def test_a_job_that_ran_and_then_succeeded_is_reached_even_with_a_failing_pod_left() -> None:
    """A finished job is what the wait was for: pods are not looked at once it is reached."""
    outcome = job_outcome(
        job(("Succeeded", "True")), [pod("ddp-worker-0", waiting="ImagePullBackOff")]
    )
    assert outcome.reached and outcome.failure is None
