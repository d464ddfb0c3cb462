"""An elastic stack through the real engine and the real training operator: `make up` creates the
PyTorchJob with its elasticPolicy exactly as the builder describes it, the operator's webhook
admits it, and every pod it creates carries the environment `builders.job_apis.pytorchjob`
computes (the local runner's emulation of elastic jobs, checked against the operator itself)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from builders.job_apis.pytorchjob import (
    injected_env,
    pytorchjob_manifest,
    replica_pods,
    training_container,
)
from settings.stack import StackSettings
from tests.e2e.conftest import Cluster, Project, Stack
from tests.support.waiting import wait_until

NAMESPACE = "default"
# How long the operator may take to make a job's pods on a loaded machine.
POD_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def stack(project: Project) -> Iterator[Stack]:
    stack = project.stack("e2e-elastic")
    yield stack
    stack.destroy()


@pytest.fixture(scope="module")
def settings(stack: Stack) -> StackSettings:
    return stack.settings()


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Any:
    from kubernetes import client

    api = cluster.api()
    return client.CoreV1Api(api), client.CustomObjectsApi(api), api


def test_up_creates_the_elastic_job_as_the_builder_describes_it(
    stack: Stack, settings: StackSettings, api: Any
) -> None:
    result = stack.up()
    assert result.summary() == {"create": 12}, result.output
    _, custom, _ = api
    job = custom.get_namespaced_custom_object(
        "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", settings.job.name
    )
    expected = pytorchjob_manifest(settings, image=settings.image.ref)["spec"]
    # What the builder set, unchanged by the API server and the operator's defaulter.
    for key, value in expected["elasticPolicy"].items():
        assert job["spec"]["elasticPolicy"][key] == value, key
    assert expected["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 2,
        "rdzvBackend": "c10d",
        "maxRestarts": 5,
    }
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


def test_the_operators_pods_get_the_elastic_environment_operator_env_computes(
    settings: StackSettings, api: Any
) -> None:
    core, _, client_api = api
    manifest = pytorchjob_manifest(settings, image=settings.image.ref)
    pods = replica_pods(manifest)
    assert pods == [("Worker", 0), ("Worker", 1)]
    names = [f"{settings.job.name}-{kind.lower()}-{index}" for kind, index in pods]
    # `up` returned once the job was created (no wait mode); the operator makes the pods after.
    wait_until(
        lambda: {pod.metadata.name for pod in core.list_namespaced_pod(NAMESPACE).items}
        >= set(names),
        f"the operator's pods {names}",
        POD_TIMEOUT_S,
    )
    for (replica_type, index), name in zip(pods, names, strict=True):
        pod = client_api.sanitize_for_serialization(core.read_namespaced_pod(name, NAMESPACE))
        template = manifest["spec"]["pytorchReplicaSpecs"][replica_type]["template"]
        template_env = training_container(template, replica_type).get("env", [])
        pod_env = training_container(pod, replica_type).get("env", [])
        # The operator appends its variables after the template's own.
        assert pod_env[: len(template_env)] == template_env, name
        operator_env = {
            item["name"]: item.get("value", "") for item in pod_env[len(template_env) :]
        }
        assert operator_env == injected_env(manifest, replica_type, index), name
        assert operator_env["PET_NNODES"] == "1:2"
        assert operator_env["PET_RDZV_ENDPOINT"] == f"{settings.job.name}-worker-0:23456"
        assert core.read_namespaced_service(name, NAMESPACE) is not None
