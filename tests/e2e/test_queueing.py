"""Jobs queued in Kueue v0.17.0 through the real engine (cluster/kueue_plane.py: Kueue with
its webhooks, waitForPodsReady, the PyTorchJob and TrainJob integrations), on kwok's fake nodes:

a. two stacks (tests/e2e/Pulumi.e2e-queue-a.yaml, -b) whose LocalQueue's ClusterQueue has quota
   for one job: the second is queued (its `up` with `waitFor: running` says where and why, and
   `make status` too) and starts when the first finishes;
c. a TrainJob (Pulumi.e2e-queue-tj.yaml) through the same queue: admitted, and its pods run;
d. a job moved to a LocalQueue that does not exist: it is replaced, and `up` fails in seconds with
   one line naming the queue.

The tests run in file order; each stack is destroyed at the end of the module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from builders.job_apis.pytorchjob import API as PYTORCHJOB
from builders.job_apis.trainjob import API as TRAINJOB_API
from cluster.control_plane import ControlPlane
from cluster.kueue_plane import cluster_queue, create_queue_object, local_queue
from readers.conditions import conditions_by_type, is_true
from readers.queue_state import (
    JOB_UID_LABEL,
    KUEUE_GROUP,
    KUEUE_VERSION,
    WORKLOAD_PLURAL,
    newest_workload,
)
from tests.e2e.conftest import Cluster, Project, Stack
from tests.e2e.test_job_outcome import EXIT_CODE, STEP_TIMEOUT, Up, show
from tests.support.waiting import wait_until

NAMESPACE = "default"
LOCAL_QUEUE = "team-a"
CLUSTER_QUEUE = "e2e-one-job"
# Two pods of one CPU and 1Gi each (the stacks' job.nodes, job.cpu, job.memory): one job's worth.
ONE_JOB = {"cpu": "2", "memory": "2Gi"}
# `up` of a job Kueue can never admit: the engine's own time and a few seconds for Kueue.
FAIL_FAST_SECONDS = 150


@pytest.fixture(scope="module", autouse=True)
def queues(cluster: Cluster, kueue: ControlPlane) -> None:
    api = cluster.api()
    create_queue_object(api, cluster_queue(CLUSTER_QUEUE, ONE_JOB))
    create_queue_object(api, local_queue(NAMESPACE, LOCAL_QUEUE, CLUSTER_QUEUE))


@pytest.fixture(scope="module")
def stacks(project: Project) -> Iterator[dict[str, Stack]]:
    made = {name: project.stack(f"e2e-queue-{name}") for name in ("a", "b", "tj")}
    yield made
    for stack in made.values():
        stack.destroy(check=False)


class Kube:
    def __init__(self, cluster: Cluster) -> None:
        from kubernetes import client

        api = cluster.api()
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def job(
        self,
        plural: str = "pytorchjobs",
        *,
        name: str,
        group: str = "kubeflow.org",
        version: str = "v1",
    ) -> Any:
        """The job, or None before it exists."""
        from kubernetes.client import ApiException

        try:
            return self.custom.get_namespaced_custom_object(group, version, NAMESPACE, plural, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def workload(self, job: dict[str, Any] | None) -> Any | None:
        """Kueue's Workload for the job, or None (no job yet, or no Workload yet)."""
        if job is None:
            return None
        listed = self.custom.list_namespaced_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            NAMESPACE,
            WORKLOAD_PLURAL,
            label_selector=f"{JOB_UID_LABEL}={job['metadata']['uid']}",
        )
        return newest_workload(listed.get("items") or [])

    def pods(self, selector: str) -> list[Any]:
        return self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items

    def end_pods(self, selector: str, code: int) -> None:
        """Every pod of the selector exits with `code` (kwok's pod-exit stage), the master last:
        its success is the job's, and cleanPodPolicy Running then deletes the pods still
        running."""
        from kubernetes.client import ApiException

        pods = sorted(self.pods(selector), key=lambda pod: "-master-" in pod.metadata.name)
        for pod in pods:
            try:
                self.core.patch_namespaced_pod(
                    pod.metadata.name,
                    NAMESPACE,
                    {"metadata": {"annotations": {EXIT_CODE: str(code)}}},
                )
            except ApiException as error:
                if error.status != 404:  # gone already
                    raise


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster)


def pytorchjob_selector(name: str) -> str:
    return PYTORCHJOB.pod_selector(name)


# -- a. quota for one job: the second waits, and starts when the first finishes -----------------


def test_the_second_job_is_queued_until_the_first_finishes(
    stacks: dict[str, Stack], kube: Kube
) -> None:
    first, second = stacks["a"], stacks["b"]
    result = first.up()
    show("make up (queue a, first)", result.output)
    job_a = kube.job(name="ddp-queue-a")
    assert job_a["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == LOCAL_QUEUE
    assert is_true(kube.workload(job_a), "Admitted"), kube.workload(job_a)
    assert "admitted by LocalQueue team-a (ClusterQueue e2e-one-job)" in result.output

    up = Up(second)
    wait_until(
        lambda: "QuotaReserved" in conditions_by_type(kube.workload(kube.job(name="ddp-queue-b"))),
        "Kueue to consider the second job",
        STEP_TIMEOUT,
    )
    job_b = kube.job(name="ddp-queue-b")
    assert job_b["spec"]["runPolicy"]["suspend"] is True, "Kueue's webhook did not suspend it"
    assert not kube.pods(pytorchjob_selector("ddp-queue-b"))
    status = second.status("--no-follow")
    show("make status (queue b, queued)", status.stdout + status.stderr)
    assert "PyTorchJob default/ddp-queue-b: Queued" in status.stdout, status.stdout
    assert (
        "Kueue: queued in LocalQueue team-a (ClusterQueue e2e-one-job): pending, reason Pending: "
        "couldn't assign flavors to pod set" in status.stdout
    ), status.stdout
    # Held back well past a reminder period, while the first job runs.
    time.sleep(35)
    assert up.running, "the second job's up returned while it was queued"

    kube.end_pods(pytorchjob_selector("ddp-queue-a"), 0)
    result = up.result()
    show("make up (queue b, second)", result.output)
    assert result.status == 0, result.output
    said = result.output.count("queued in LocalQueue team-a (ClusterQueue e2e-one-job): pending")
    assert said >= 2, result.output  # at once, and again after 30 seconds
    assert "admitted by LocalQueue team-a (ClusterQueue e2e-one-job)" in result.output
    job_a = kube.job(name="ddp-queue-a")
    assert any(
        c["type"] == "Succeeded" and c["status"] == "True" for c in job_a["status"]["conditions"]
    )
    assert is_true(kube.workload(kube.job(name="ddp-queue-b")), "Admitted")
    first.destroy()
    # The second job ends and stays: scenario d moves it to another queue.
    kube.end_pods(pytorchjob_selector("ddp-queue-b"), 0)


# -- c. a TrainJob through the same queue ------------------------------------------------------

TRAINJOB = {"plural": "trainjobs", "group": "trainer.kubeflow.org", "version": "v1alpha1"}


def test_a_trainjob_is_admitted_through_the_same_queue_and_runs(
    stacks: dict[str, Stack], kube: Kube
) -> None:
    """Kueue resumes the TrainJob it admits, Trainer resumes its JobSet, and the pods come: the
    Kueue this plane runs is built against the Trainer API the plane runs (scripts/e2e-tools.sh,
    build_job_controllers)."""
    stack = stacks["tj"]
    result = stack.up()  # waitFor: running
    show("make up (queue tj)", result.output)
    assert "admitted by LocalQueue team-a (ClusterQueue e2e-one-job)" in result.output
    job = kube.job(name="ddp-queue-tj", **TRAINJOB)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == LOCAL_QUEUE
    workload = kube.workload(job)
    assert is_true(workload, "Admitted"), workload
    assert workload["status"]["admission"]["clusterQueue"] == CLUSTER_QUEUE
    assert len(kube.pods(TRAINJOB_API.pod_selector("ddp-queue-tj"))) == 2
    status = stack.status("--no-follow")
    show("make status (queue tj)", status.stdout + status.stderr)
    assert "Kueue: admitted by LocalQueue team-a (ClusterQueue e2e-one-job)" in status.stdout
    stack.destroy()


# -- d. a LocalQueue that does not exist fails up at once ---------------------------------------


def test_a_local_queue_that_does_not_exist_fails_up_in_seconds_with_one_line(
    stacks: dict[str, Stack], kube: Kube
) -> None:
    """On the second job of scenario a, which Kueue admitted from team-a: its queue changes,
    so it is replaced (Kueue's webhook refuses to change the label it admitted a job by), and
    the new one cannot be admitted."""
    stack = stacks["b"]
    admitted = kube.job(name="ddp-queue-b")
    assert admitted is not None, "scenario a's second job is gone"
    stack.config_set("job.queue", "no-such-queue")
    began = time.monotonic()
    result = stack.up(check=False)
    took = time.monotonic() - began
    show("make up (queue d)", result.output)
    assert result.status != 0
    lines = [line for line in result.output.splitlines() if "cannot be admitted by Kueue" in line]
    assert lines, result.output
    assert "the LocalQueue no-such-queue does not exist in the job's namespace" in lines[0]
    assert "Traceback" not in result.output
    assert took < FAIL_FAST_SECONDS, f"up took {took:.0f}s"
    job = kube.job(name="ddp-queue-b")
    assert job["metadata"]["uid"] != admitted["metadata"]["uid"], "updated, not replaced"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "no-such-queue"
    assert job["spec"]["runPolicy"]["suspend"] is True
