"""The program with `job.api: trainjob` under mocks (components/train_job.py): the TrainJob and
the TrainingRuntime it runs on, replaced as a PyTorchJob is, and the outputs' commands."""

from __future__ import annotations

import pytest

from tests.pulumi_harness import ProgramResult, run_program

TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
RUNTIME = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainingRuntime"
PYTORCHJOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
COMPONENT = "pytorch-distributed:index:TrainJob"


@pytest.fixture(scope="module")
def trainjob() -> ProgramResult:
    result = run_program("trainjob")
    assert result.error is None, result.error
    return result


def test_the_trainjob_and_its_runtime_are_children_of_the_trainjob_component(
    trainjob: ProgramResult,
) -> None:
    component = trainjob.one(COMPONENT)
    job, runtime = trainjob.one(TRAINJOB), trainjob.one(RUNTIME)
    assert not trainjob.of_type(PYTORCHJOB)
    assert job.parent == runtime.parent == component.urn
    assert job.name == "training-job-job" and runtime.name == "training-job-runtime"
    assert runtime.urn in job.dependencies  # the runtime exists before the job names it
    assert job.inputs["spec"]["runtimeRef"]["name"] == runtime.inputs["metadata"]["name"]


def test_a_spec_change_replaces_the_trainjob_deleting_it_first(trainjob: ProgramResult) -> None:
    job = trainjob.one(TRAINJOB)
    # The spec, and the labels Kueue admitted the job by (its webhook refuses to change them).
    assert job.replace_on_changes == [
        "spec",
        'metadata.labels["kueue.x-k8s.io/queue-name"]',
        'metadata.labels["kueue.x-k8s.io/priority-class"]',
    ]
    assert job.delete_before_replace
    # A new runtime comes with a new name: created before the old one goes.
    assert not trainjob.one(RUNTIME).delete_before_replace


def test_the_trainjob_is_deleted_in_the_background_and_made_once_its_old_run_is_gone(
    trainjob: ProgramResult,
) -> None:
    # Foreground, Trainer would bring its JobSet back while the delete waits for it.
    job = trainjob.one(TRAINJOB)
    assert job.inputs["metadata"]["annotations"]["pulumi.com/deletionPropagationPolicy"] == (
        "background"
    )
    # The pods' admission first (it fails at once), then the wait for the previous run.
    assert job.hooks["before_create"] == [
        "training-job-pod-admission",
        "training-job-previous-run",
    ]


def test_the_outputs_name_rank_0_by_its_completion_index(trainjob: ProgramResult) -> None:
    outputs = {key: output.value for key, output in trainjob.outputs.items()}
    assert outputs["jobName"] == "ddp-trainjob"
    assert outputs["statusCommand"] == (
        "kubectl --namespace default get trainjobs.trainer.kubeflow.org/ddp-trainjob --watch"
    )
    assert "batch.kubernetes.io/job-completion-index=0" in outputs["logsCommand"]
    # The job's pods may be gone when the checkpoints are wanted: a reader pod of its own.
    assert outputs["checkpointCommand"] == "make checkpoint STACK=trainjob"


def test_the_cluster_runtime_is_referenced_and_not_registered() -> None:
    result = run_program("trainjob", overrides={"job": {"clusterRuntime": "torch-distributed"}})
    assert result.error is None, result.error
    assert not result.of_type(RUNTIME)
    assert result.one(TRAINJOB).inputs["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"


def test_trainjob_on_runai_fails_before_anything_is_registered() -> None:
    result = run_program("trainjob", overrides={"platform": "runai", "runaiProject": "team-a"})
    assert result.error is not None
    assert "job.api = 'trainjob': platform runai schedules PyTorchJob" in str(result.error)
    assert not result.of_type(TRAINJOB)
