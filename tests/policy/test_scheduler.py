"""runai-scheduler: on Run:ai stacks every PyTorchJob pod uses runai-scheduler; job-names-a-queue:
a job carries its scheduler's queue label."""

from __future__ import annotations

import pytest

from builders.manifests import KUEUE_QUEUE_LABEL, RUNAI_QUEUE_LABEL
from policy.rules.model import PYTORCHJOB_TYPE, TRAINJOB_TYPE, UNKNOWN
from policy.rules.scheduler import QUEUE_LABELS, job_names_a_queue, runai_scheduler
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


# -- job-names-a-queue --------------------------------------------------------------------------


def labelled(job: dict, **labels: str) -> dict:
    job["metadata"]["labels"] = {"app.kubernetes.io/name": "pytorch-distributed", **labels}
    return job


@pytest.mark.parametrize("label", QUEUE_LABELS)
@pytest.mark.parametrize("resource_type", [PYTORCHJOB_TYPE, TRAINJOB_TYPE])
def test_a_job_with_any_schedulers_queue_label_passes(resource_type: str, label: str) -> None:
    job = samples.pytorchjob() if resource_type == PYTORCHJOB_TYPE else samples.trainjob()
    assert job_names_a_queue(resource_type, labelled(job, **{label: "team-a"})) == []


@pytest.mark.parametrize("resource_type", [PYTORCHJOB_TYPE, TRAINJOB_TYPE])
def test_a_job_without_a_queue_label_is_told_which_setting_names_one(resource_type: str) -> None:
    job = samples.pytorchjob() if resource_type == PYTORCHJOB_TYPE else samples.trainjob()
    [message] = job_names_a_queue(resource_type, labelled(job))
    assert "set job.queue" in message and "kueue.x-k8s.io/queue-name" in message


def test_unknown_labels_wait_for_up_and_other_resources_are_not_jobs() -> None:
    job = samples.pytorchjob()
    job["metadata"]["labels"] = UNKNOWN
    assert job_names_a_queue(PYTORCHJOB_TYPE, job) == []
    assert job_names_a_queue("kubernetes:core/v1:PersistentVolumeClaim", samples.claim()) == []


def test_the_queue_label_is_the_one_the_program_sets() -> None:
    assert QUEUE_LABELS[:2] == (KUEUE_QUEUE_LABEL, RUNAI_QUEUE_LABEL)
