"""runai-scheduler: on Run:ai stacks every PyTorchJob pod uses runai-scheduler."""

from __future__ import annotations

from policy.rules.model import PYTORCHJOB_TYPE
from policy.rules.scheduler import runai_scheduler
from tests.policy import samples

RUNAI = {"platform": "runai"}


def without_scheduler(namespace: str = "runai-team-a") -> dict:
    job = samples.pytorchjob()
    job["metadata"]["namespace"] = namespace
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        del spec["template"]["spec"]["schedulerName"]
    return job


def test_runai_job_with_runai_scheduler_passes() -> None:
    assert runai_scheduler(PYTORCHJOB_TYPE, samples.pytorchjob(), RUNAI) == []


def test_missing_scheduler_on_runai_fires_per_replica() -> None:
    messages = runai_scheduler(PYTORCHJOB_TYPE, without_scheduler("training"), RUNAI)
    assert messages == [
        "spec.pytorchReplicaSpecs.Master.template.spec.schedulerName is not set; "
        "pods on a Run:ai stack must use 'runai-scheduler'",
        "spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName is not set; "
        "pods on a Run:ai stack must use 'runai-scheduler'",
    ]


def test_default_scheduler_on_runai_fires() -> None:
    job = samples.pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = (
        "default-scheduler"
    )
    messages = runai_scheduler(PYTORCHJOB_TYPE, job, RUNAI)
    assert len(messages) == 1
    assert "Worker.template.spec.schedulerName is 'default-scheduler'" in messages[0]


def test_runai_namespace_marks_a_runai_stack_without_config() -> None:
    assert len(runai_scheduler(PYTORCHJOB_TYPE, without_scheduler("runai-team-a"), {})) == 2


def test_kubeflow_stacks_need_no_runai_scheduler() -> None:
    assert runai_scheduler(PYTORCHJOB_TYPE, without_scheduler("default"), {}) == []
    config = {"platform": "kubeflow"}
    assert runai_scheduler(PYTORCHJOB_TYPE, without_scheduler("runai-team-a"), config) == []
