"""readers/job_state.py: what `pulumi up`'s error and `make status` say about a job.

The objects are shaped as the API server returns them (the training operator v1.9.4's job status
and kwok's or a kubelet's pod status, as the real-engine suite reads them back)."""

from __future__ import annotations

from typing import Any

import pytest

from readers.job_state import (
    PEER_LOST_EXIT_CODE,
    START_FAILURES,
    JobState,
    Progress,
    exit_code_meaning,
    failure_report,
    job_state,
    progress_line,
    recreated_lines,
    replica_line,
    replica_of,
    status_table,
)

JOB = "ddp-outcome"
IMAGE = "registry.example.com/trainer@sha256:" + "4" * 64


def condition(kind: str, status: str, at: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "lastUpdateTime": at,
    }


CREATED = condition(
    "Created", "True", "2026-12-03T19:07:35Z", "PyTorchJobCreated", f"PyTorchJob {JOB} is created."
)
RUNNING = condition(
    "Running", "True", "2026-12-03T19:08:27Z", "PyTorchJobRunning", f"PyTorchJob {JOB} is running."
)
FAILED = condition(
    "Failed",
    "True",
    "2026-12-03T19:08:28Z",
    "PyTorchJobFailed",
    f'job "{JOB}" is failing because "Master" replica(s) failed.',
)


def job(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": JOB, "namespace": "default", "uid": "job-uid", "resourceVersion": "7"},
        "status": {"conditions": list(conditions), "startTime": "2026-12-03T19:07:35Z"},
    }


def pod(
    replica_type: str,
    index: int,
    phase: str,
    state: dict[str, Any],
    *,
    last: dict[str, Any] | None = None,
    restarts: int = 0,
    labels: bool = True,
    deleting: bool = False,
) -> dict[str, Any]:
    name = f"{JOB}-{replica_type}-{index}"
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if labels:
        metadata["labels"] = {
            "training.kubeflow.org/job-name": JOB,
            "training.kubeflow.org/replica-type": replica_type,
            "training.kubeflow.org/replica-index": str(index),
        }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-03T19:08:29Z"
    status = {"name": "pytorch", "image": IMAGE, "restartCount": restarts, "state": state}
    status["lastState"] = {"terminated": last} if last else {}
    return {"metadata": metadata, "status": {"phase": phase, "containerStatuses": [status]}}


def exited(code: int, reason: str) -> dict[str, Any]:
    return {
        "exitCode": code,
        "reason": reason,
        "startedAt": "2026-12-03T19:08:27Z",
        "finishedAt": "2026-12-03T19:08:28Z",
    }


RUNNING_STATE = {"running": {"startedAt": "2026-12-03T19:08:27Z"}}


def failed_master_job() -> JobState:
    """What the suite's scenario (b) leaves: the master exited 1 under restartPolicy ExitCode,
    the operator failed the job and is deleting the worker (cleanPodPolicy Running)."""
    return job_state(
        job(CREATED, {**RUNNING, "status": "False"}, FAILED),
        [
            pod("worker", 0, "Running", RUNNING_STATE, deleting=True),
            pod("master", 0, "Failed", {"terminated": exited(1, "Error")}),
        ],
    )


def test_failure_report_names_the_job_the_reason_and_each_failed_pod_with_its_log() -> None:
    log = ["epoch 3 loss 0.25", "Traceback (most recent call last):", "ValueError: bad batch"]
    report = failure_report(
        failed_master_job(),
        {f"{JOB}-master-0": log},
        next_steps=["conditions, pods and the master's log: make status STACK=e2e-outcome"],
    )
    assert report == "\n".join(
        [
            f"PyTorchJob default/{JOB} failed (PyTorchJobFailed, 2026-12-03T19:08:28Z): "
            f'job "{JOB}" is failing because "Master" replica(s) failed.',
            f"  pod {JOB}-master-0 (Master): Failed, exit code 1 (Error): the training code or "
            "its data failed (see its log)",
            "    last 3 lines of its log:",
            "    | epoch 3 loss 0.25",
            "    | Traceback (most recent call last):",
            "    | ValueError: bad batch",
            "  conditions, pods and the master's log: make status STACK=e2e-outcome",
        ]
    )


def test_failure_report_says_why_a_log_is_missing() -> None:
    missing = "the API server could not get it (500 Internal Server Error)"
    report = failure_report(failed_master_job(), {f"{JOB}-master-0": missing})
    assert report.splitlines()[2] == f"    (no log: {missing})"


def test_failure_report_of_restarts_past_backoff_limit_names_the_last_exit_and_restarts() -> None:
    """restartPolicy OnFailure: the kubelet restarted the container in place until the operator
    failed the job at backoffLimit; the pod still runs, waiting to be restarted again, and the
    failure is its previous container's."""
    backoff = condition(
        "Failed",
        "True",
        "2026-12-03T20:00:00Z",
        "PyTorchJobFailed",
        f"Job {JOB} has failed because it has reached the specified backoff limit",
    )
    state = job_state(
        job(CREATED, backoff),
        [
            pod(
                "master",
                0,
                "Running",
                {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                last=exited(137, "OOMKilled"),
                restarts=3,
            ),
            pod("worker", 0, "Running", RUNNING_STATE),
        ],
    )
    [master] = state.failed_replicas
    assert (master.exit_code, master.reason, master.waiting, master.exited_now) == (
        137,
        "OOMKilled",
        "CrashLoopBackOff",
        False,
    )
    lines = failure_report(state, {master.pod: ["killed"]}).splitlines()
    assert lines[1] == (
        f"  pod {JOB}-master-0 (Master): Running (CrashLoopBackOff), last exit code 137 "
        "(OOMKilled), 3 restarts: out of memory: the kernel killed it at the pod's memory limit "
        "(job.memory); back-off 40s"
    )


def test_failure_report_without_a_failed_pod_says_so() -> None:
    deadline = condition(
        "Failed",
        "True",
        "2026-12-10T19:07:35Z",
        "PyTorchJobFailed",
        f"Job {JOB} has failed because it was active longer than specified deadline",
    )
    report = failure_report(job_state(job(CREATED, deadline), []), {})
    assert "active longer than specified deadline" in report.splitlines()[0]
    assert report.splitlines()[1] == (
        "  no pod of it reports a failed container (deleted by cleanPodPolicy?)"
    )


@pytest.mark.parametrize(
    ("code", "reason", "meaning"),
    [
        (143, "Error", "stopped by SIGTERM (preempted, evicted or deleted)"),
        (137, "Error", "killed by SIGKILL"),
        (137, "OOMKilled", "out of memory"),
        (130, "Error", "stopped by SIGINT"),
        (2, "Error", "the training code or its data failed"),
        (0, "Completed", ""),
    ],
)
def test_exit_code_meaning(code: int, reason: str, meaning: str) -> None:
    assert exit_code_meaning(code, reason).startswith(meaning)
    assert bool(exit_code_meaning(code, reason)) == bool(meaning)


def test_status_table_lists_conditions_with_times_pods_and_events() -> None:
    succeeded = condition(
        "Succeeded",
        "True",
        "2026-12-03T19:10:26Z",
        "PyTorchJobSucceeded",
        f"PyTorchJob {JOB} is successfully completed.",
    )
    state = job_state(
        job(succeeded, {**RUNNING, "status": "False"}, CREATED),
        [
            pod("worker", 0, "Succeeded", {"terminated": exited(0, "Completed")}),
            pod("master", 0, "Succeeded", {"terminated": exited(0, "Completed")}),
        ],
    )
    events = [
        {
            "lastTimestamp": "2026-12-03T19:08:59Z",
            "type": "Normal",
            "reason": "ExitedWithCode",
            "message": f"Pod: default.{JOB}-worker-0 exited with code 143",
        }
    ]
    assert status_table(state, events) == [
        f"PyTorchJob default/{JOB}: Succeeded",
        "CONDITION  STATUS  SINCE                 REASON               MESSAGE",
        f"Created    True    2026-12-03T19:07:35Z  PyTorchJobCreated    PyTorchJob {JOB} is "
        "created.",
        f"Running    False   2026-12-03T19:08:27Z  PyTorchJobRunning    PyTorchJob {JOB} is "
        "running.",
        "Succeeded  True    2026-12-03T19:10:26Z  PyTorchJobSucceeded  PyTorchJob "
        f"{JOB} is successfully completed.",
        "",
        "POD                   TYPE    PHASE      RESTARTS  EXIT CODE  REASON",
        f"{JOB}-master-0  Master  Succeeded  0         0          Completed",
        f"{JOB}-worker-0  Worker  Succeeded  0         0          Completed",
        "",
        "RECENT EVENTS",
        f"2026-12-03T19:08:59Z  Normal  ExitedWithCode  Pod: default.{JOB}-worker-0 exited with "
        "code 143",
    ]


def test_status_table_of_a_job_the_operator_has_not_seen_yet() -> None:
    assert status_table(job_state(job(), [])) == [
        f"PyTorchJob default/{JOB}: Pending",
        "(no conditions yet: the operator has not picked the job up)",
        "",
        "(no pods)",
    ]


def test_pending_pods_say_what_they_wait_for() -> None:
    unscheduled = {
        "metadata": {"name": f"{JOB}-master-0", "labels": {}},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }
    pulling = pod(
        "worker",
        0,
        "Pending",
        {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
    )
    state = job_state(job(CREATED), [pulling, unscheduled])
    master, worker = state.replicas
    assert (master.state, master.message) == (
        "Pending (Unschedulable)",
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    )
    assert worker.state == "Pending (ImagePullBackOff)" and not worker.failed
    assert progress_line(state) == (
        f"PyTorchJob default/{JOB} Created: PyTorchJob {JOB} is created. "
        f"[{JOB}-master-0 Pending (Unschedulable), {JOB}-worker-0 Pending (ImagePullBackOff)]"
    )


# What containerd 1.6 reports through the CRI when the registry refuses the stack's credential
# (the e2e real node's pull with a wrong password).
PULL_REFUSED = (
    'failed to pull and unpack image "127.0.0.1:5000/trainer@sha256:ab": failed to resolve '
    "reference: pulling from host 127.0.0.1:5000 failed with status code [manifests "
    "sha256:ab]: 401 Unauthorized"
)


def test_a_container_that_cannot_start_is_named_with_the_kubelets_message() -> None:
    refused = {"waiting": {"reason": "ErrImagePull", "message": PULL_REFUSED}}
    creating = {"waiting": {"reason": "ContainerCreating"}}
    state = job_state(job(CREATED), [pod("master", 0, "Pending", refused)])
    assert [r.pod for r in state.replicas_that_cannot_start] == [f"{JOB}-master-0"]
    (master,) = state.replicas_that_cannot_start
    assert (master.state, master.message) == ("Pending (ErrImagePull)", PULL_REFUSED)
    assert not job_state(
        job(CREATED), [pod("master", 0, "Pending", creating)]
    ).replicas_that_cannot_start


def test_an_init_container_that_cannot_start_stands_for_its_pod() -> None:
    """The operator's init container (a worker waits for the master) pulls an image of its own;
    meanwhile the training container says only PodInitializing."""
    worker = pod("worker", 0, "Pending", {"waiting": {"reason": "PodInitializing"}})
    worker["status"]["initContainerStatuses"] = [
        {
            "name": "init-pytorch",
            "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "no secret"}},
        }
    ]
    replica = replica_of(worker)
    assert (replica.waiting, replica.message, replica.cannot_start) == (
        "CreateContainerConfigError",
        "no secret",
        True,
    )


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing", "CrashLoopBackOff"])
def test_waiting_that_ends_by_itself_is_no_start_failure(reason: str) -> None:
    assert reason not in START_FAILURES
    assert not replica_of(pod("master", 0, "Pending", {"waiting": {"reason": reason}})).cannot_start


def test_job_phase_and_outcome_follow_the_operator_conditions() -> None:
    restarting = condition(
        "Restarting",
        "True",
        "2026-12-03T19:08:59Z",
        "PyTorchJobRestarting",
        f"PyTorchJob {JOB} is restarting because 1 Worker replica(s) failed.",
    )
    running_before = {**RUNNING, "status": "False"}
    assert job_state(job(CREATED), []).phase == "Created"
    assert job_state(job(CREATED, RUNNING), []).phase == "Running"
    # Created and Running in the same second (the pods ran at once): the later one in the list.
    at_once = {**RUNNING, "lastTransitionTime": CREATED["lastTransitionTime"]}
    assert job_state(job(CREATED, at_once), []).phase == "Running"
    state = job_state(job(CREATED, running_before, restarting), [])
    assert (state.phase, state.outcome, state.is_true("Running")) == ("Restarting", None, False)
    assert failed_master_job().outcome == "Failed"
    assert failed_master_job().phase == "Failed"


def test_pods_sort_master_first_then_workers_by_index_and_names_stand_in_for_labels() -> None:
    pods = [
        pod("worker", 10, "Running", RUNNING_STATE, labels=False),
        pod("worker", 2, "Running", RUNNING_STATE),
        pod("master", 0, "Running", RUNNING_STATE, labels=False),
    ]
    state = job_state(job(CREATED, RUNNING), pods)
    assert [(r.replica_type, r.index) for r in state.replicas] == [
        ("Master", 0),
        ("Worker", 2),
        ("Worker", 10),
    ]
    assert replica_of(pods[2]).pod == f"{JOB}-master-0"


def test_a_pod_the_operator_recreated_is_named_with_its_previous_exit() -> None:
    """restartPolicy ExitCode: the failed pod is deleted and a new one of the same name starts
    with restart count 0, so only its new uid tells it apart."""
    preempted = pod("worker", 0, "Failed", {"terminated": exited(143, "Error")})
    before = job_state(
        job(CREATED, RUNNING), [pod("master", 0, "Running", RUNNING_STATE), preempted]
    )
    fresh = pod("worker", 0, "Pending", {"waiting": {"reason": "ContainerCreating"}})
    fresh["metadata"]["uid"] = "uid-new"
    after = job_state(job(CREATED, RUNNING), [pod("master", 0, "Running", RUNNING_STATE), fresh])
    assert recreated_lines(before, after) == [
        f"pod {JOB}-worker-0 was recreated: the previous one exited with code 143 (stopped by "
        "SIGTERM (preempted, evicted or deleted); the trainer saved a checkpoint)"
    ]
    assert recreated_lines(None, after) == []
    assert recreated_lines(after, after) == []


def test_progress_tells_each_state_after_the_pods_recreated_since_the_last() -> None:
    said: list[str] = []
    progress = Progress(said.append)
    first = job_state(job(CREATED, RUNNING), [pod("worker", 0, "Running", RUNNING_STATE)])
    replaced = pod("worker", 0, "Pending", {"waiting": {"reason": "ContainerCreating"}})
    replaced["metadata"]["uid"] = "uid-new"
    second = job_state(job(CREATED, RUNNING), [replaced])
    assert Progress.key(first) != Progress.key(second)
    progress(first)
    progress(second)
    assert said == [
        progress_line(first),
        f"pod {JOB}-worker-0 was recreated",
        progress_line(second),
    ]


def test_the_peer_lost_exit_code_is_the_trainers() -> None:
    from trainer.cli import EXIT_PEER_LOST

    assert PEER_LOST_EXIT_CODE == EXIT_PEER_LOST
    assert "lost a peer" in exit_code_meaning(EXIT_PEER_LOST, "Error")


def test_a_pod_the_kubelet_evicted_says_why_from_the_pods_own_status() -> None:
    """An eviction (or an admission refusal) fails the pod with no container exit: the reason
    and message are the pod's."""
    evicted = pod("master", 0, "Failed", {})
    evicted["status"].update(reason="Evicted", message="The node had condition:  [DiskPressure]. ")
    replica = replica_of(evicted)
    assert (replica.reason, replica.message) == (
        "Evicted",
        "The node had condition: [DiskPressure].",
    )
    assert replica.exit_code is None
    assert replica_line(replica) == (
        f"pod {JOB}-master-0 (Master): Failed, Evicted; The node had condition: [DiskPressure]."
    )
    # A container's own exit keeps saying how it ended.
    oom = pod("master", 0, "Failed", {"terminated": exited(137, "OOMKilled")})
    oom["status"]["reason"] = "Evicted"
    assert replica_of(oom).reason == "OOMKilled"
