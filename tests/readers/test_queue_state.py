"""readers/queue_state.py: where Kueue has a queued job, and when waiting cannot help.

The Workloads are shaped as Kueue v0.17's (kueue.x-k8s.io/v1beta2) with its own condition reasons
and messages: its workload controller's for a missing queue, its flavor assigner's for quota."""

from __future__ import annotations

from typing import Any

import pytest

from builders.manifests import KUEUE_QUEUE_LABEL
from readers.job_state import Progress, job_state, progress_line, status_table
from readers.queue_state import (
    JOB_UID_LABEL,
    QueueState,
    newest_workload,
    queue_line,
    queue_name,
    queue_state,
)

AT = "2026-12-06T01:10:00Z"


def workload(*conditions: dict[str, Any], cluster_queue: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": []}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "pytorchjob-ddp-e2e-4c1d2",
            "namespace": "default",
            "labels": {JOB_UID_LABEL: "job-uid"},
            "creationTimestamp": AT,
        },
        "spec": {"queueName": "team-a"},
        "status": status,
    }


def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": AT,
    }


LOCAL_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "LocalQueue",
    "metadata": {"name": "team-a", "namespace": "default"},
    "spec": {"clusterQueue": "gpus"},
}
PENDING = condition(
    "QuotaReserved",
    "False",
    "Pending",
    "couldn't assign flavors to pod set master: insufficient unused quota for cpu in flavor "
    "default-flavor, 2 more needed",
)
NEVER_FITS = condition(
    "QuotaReserved",
    "False",
    "Pending",
    "couldn't assign flavors to pod set master: insufficient quota for cpu in flavor "
    "default-flavor, previously considered podsets requests (0) + current podset request (8) > "
    "maximum capacity (4)",
)
RESERVED = condition(
    "QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpus"
)
ADMITTED = condition("Admitted", "True", "Admitted", "The workload is admitted")
EVICTED = condition(
    "Evicted",
    "True",
    "Preempted",
    "Preempted to accommodate a workload (UID: 9a1b, JobUID: 77c3) due to prioritization in the "
    "ClusterQueue",
)
PREEMPTED = condition("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload")


def test_a_pending_job_says_where_it_is_queued_and_the_quota_it_lacks() -> None:
    state = queue_state("team-a", workload(PENDING), LOCAL_QUEUE)
    assert state.waiting and state.hopeless is None
    assert queue_line(state) == (
        "queued in LocalQueue team-a (ClusterQueue gpus): pending, reason Pending: couldn't "
        "assign flavors to pod set master: insufficient unused quota for cpu in flavor "
        "default-flavor, 2 more needed"
    )


def test_an_admitted_job_names_the_cluster_queue_that_admitted_it() -> None:
    state = queue_state("team-a", workload(RESERVED, ADMITTED, cluster_queue="gpus"), None)
    assert state.admitted and not state.waiting and state.hopeless is None
    assert queue_line(state) == "admitted by LocalQueue team-a (ClusterQueue gpus)"


def test_a_preempted_job_waits_again_and_says_why() -> None:
    evicted = workload(
        condition("QuotaReserved", "False", "Pending", "Preempted to accommodate a workload"),
        condition("Admitted", "False", "NoReservation", "The workload has no reservation"),
        EVICTED,
        PREEMPTED,
    )
    state = queue_state("team-a", evicted, LOCAL_QUEUE)
    assert state.waiting and state.hopeless is None
    line = queue_line(state)
    assert line.startswith("queued in LocalQueue team-a (ClusterQueue gpus): pending")
    assert line.endswith("; preempted (InClusterQueue: Preempted to accommodate a workload)")


def test_a_missing_local_queue_is_hopeless_and_named_before_kueue_has_a_workload() -> None:
    state = queue_state("team-z", None, None, local_queue_exists=False)
    assert state.hopeless == (
        "the LocalQueue team-z does not exist in the job's namespace (job.queue names it; a "
        "cluster administrator creates it)"
    )


def test_kueues_missing_local_queue_alone_is_not_trusted_over_the_api_server() -> None:
    # Kueue's cache may lag a LocalQueue just created: the API server's word wins.
    said = condition("QuotaReserved", "False", "Inadmissible", "LocalQueue team-a doesn't exist")
    assert queue_state("team-a", workload(said), LOCAL_QUEUE).hopeless is None
    unknown = queue_state("team-a", workload(said), None)  # not allowed to read LocalQueues
    assert unknown.hopeless == "Kueue says: LocalQueue team-a doesn't exist"


def test_a_missing_cluster_queue_is_hopeless() -> None:
    said = condition("QuotaReserved", "False", "Inadmissible", "ClusterQueue gpus doesn't exist")
    state = queue_state("team-a", workload(said), LOCAL_QUEUE)
    assert state.hopeless == (
        "the LocalQueue team-a sends jobs to the ClusterQueue gpus, which does not exist"
    )


def test_a_job_larger_than_the_whole_quota_is_hopeless_and_says_what_to_change() -> None:
    state = queue_state("team-a", workload(NEVER_FITS), LOCAL_QUEUE)
    hopeless = state.hopeless
    assert hopeless is not None
    assert hopeless.startswith("the job asks for more than the whole quota of gpus")
    assert "> maximum capacity (4)" in hopeless and "job.cpu" in hopeless


def test_a_resource_the_cluster_queue_has_no_quota_of_is_hopeless() -> None:
    said = condition(
        "QuotaReserved",
        "False",
        "Pending",
        "couldn't assign flavors to pod set master: resource nvidia.com/gpu unavailable in "
        "ClusterQueue",
    )
    hopeless = queue_state("team-a", workload(said), LOCAL_QUEUE).hopeless
    assert hopeless is not None and "nvidia.com/gpu unavailable" in hopeless


def test_no_workload_yet_is_a_wait_and_a_cluster_without_kueue_queues_nothing() -> None:
    state = queue_state("team-a", None, LOCAL_QUEUE)
    assert state.waiting and state.hopeless is None
    assert "no Workload yet" in queue_line(state)
    absent = QueueState(local_queue="team-a", kueue_installed=False)
    assert not absent.waiting and absent.hopeless is None
    assert "the cluster has no Kueue" in queue_line(absent)


def test_finished_workloads_wait_for_nothing() -> None:
    done = workload(RESERVED, condition("Finished", "True", "Succeeded", "Job finished"))
    assert not queue_state("team-a", done, LOCAL_QUEUE).waiting


def test_the_queue_name_is_the_jobs_label_and_the_newest_live_workload_wins() -> None:
    assert queue_name({"metadata": {"labels": {KUEUE_QUEUE_LABEL: "team-a"}}}) == "team-a"
    assert queue_name({"metadata": {}}) is None
    old, new, going = workload(PENDING), workload(PENDING), workload(PENDING)
    old["metadata"] = {**old["metadata"], "name": "old", "creationTimestamp": "2026-12-06T01:00Z"}
    new["metadata"] = {**new["metadata"], "name": "new", "creationTimestamp": "2026-12-06T01:05Z"}
    going["metadata"] = {
        **going["metadata"],
        "name": "going",
        "creationTimestamp": "2026-12-06T01:09Z",
        "deletionTimestamp": "2026-12-06T01:10Z",
    }
    newest = newest_workload([old, going, new])
    assert newest is not None and newest["metadata"]["name"] == "new"
    assert newest_workload([]) is None


SUSPENDED_JOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {
        "name": "ddp-e2e",
        "namespace": "default",
        "uid": "job-uid",
        "labels": {KUEUE_QUEUE_LABEL: "team-a"},
    },
    "status": {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "PyTorchJobCreated",
                "message": "PyTorchJob ddp-e2e is created.",
                "lastTransitionTime": AT,
            },
            {
                "type": "Suspended",
                "status": "True",
                "reason": "PyTorchJobSuspended",
                "message": "PyTorchJob ddp-e2e is suspended.",
                "lastTransitionTime": AT,
            },
        ]
    },
}


def test_a_queued_job_reads_queued_with_kueues_reason_in_progress_and_status() -> None:
    queue = queue_state("team-a", workload(PENDING), LOCAL_QUEUE)
    state = job_state(SUSPENDED_JOB, [], queue)
    assert state.queued and state.phase == "Queued"
    assert progress_line(state) == (
        f"PyTorchJob default/ddp-e2e Queued: {queue_line(queue)} [no pods yet]"
    )
    table = status_table(state)
    assert table[0] == "PyTorchJob default/ddp-e2e: Queued"
    assert table[1] == f"Kueue: {queue_line(queue)}"


def test_a_hopeless_job_says_so_in_the_status_table() -> None:
    queue = queue_state("team-z", None, None, local_queue_exists=False)
    table = status_table(job_state(SUSPENDED_JOB, [], queue))
    assert table[2] == f"  it cannot be admitted: {queue.hopeless}"


def test_a_queued_job_is_said_again_each_reminder_period(monkeypatch: pytest.MonkeyPatch) -> None:
    import readers.job_state as job_state_module

    state = job_state(SUSPENDED_JOB, [], queue_state("team-a", workload(PENDING), LOCAL_QUEUE))
    clock = iter([1000.0, 1010.0, 1031.0])
    monkeypatch.setattr(job_state_module.time, "monotonic", lambda: next(clock))
    first, same_period, next_period = (Progress.key(state) for _ in range(3))
    assert first == same_period != next_period
    admitted = job_state(SUSPENDED_JOB, [], queue_state("team-a", workload(RESERVED, ADMITTED)))
    assert not admitted.queued
    assert Progress.key(admitted) == Progress.key(admitted)  # no reminders once admitted
