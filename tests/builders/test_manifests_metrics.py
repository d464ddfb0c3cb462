"""`metrics.enabled` in the manifests (builders/manifests.py's `contract_env` and `metrics_ports`,
placed by each job API): every training container, of either job API and whatever it runs (the
trainer, a `job.command`), is told `METRICS_PORT` and has the container port `metrics`; without
metrics, neither, and nothing else of the job changes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from builders.job_apis.pytorchjob import MASTER_PORT, PORT_NAME
from builders.job_apis.trainjob import TRAINER_PORT
from builders.manifests import METRICS_PORT_NAME, contract_env, metrics_ports
from builders.stack_objects import stack_objects
from settings.stack import StackSettings, parse_settings
from settings.values import METRICS_PORT_ENV
from tests.builders import pod_templates
from tests.builders.k8s_rules import (
    PORT_NAME as IANA_PORT_NAME,
)
from tests.builders.k8s_rules import (
    restricted_violations,
    validate_core,
    validate_manifest,
)
from tests.builders.stack_settings import IMAGE

APIS = ("pytorchjob", "trainjob")
PORT = 9500
OWN_CODE = {"command": ["train.py", "--epochs", "3"], "restartPolicy": "OnFailure"}
# What the pods run, and how many: the trainer, your own command (under torchrun or as it is),
# one pod or several.
VARIANTS: dict[str, dict[str, Any]] = {
    "trainer": {},
    "one-node": {"nodes": 1},
    "own-code": OWN_CODE,
    "own-launcher": {**OWN_CODE, "command": ["bash", "run.sh"], "launcher": "none"},
}
CASES = [(api, variant) for api in APIS for variant in VARIANTS]
CASES.append(("pytorchjob", "elastic"))


def settings_for(api: str, job: dict[str, Any], **metrics: Any) -> StackSettings:
    values: dict[str, Any] = {
        "image": {"repository": "registry.example.com/ml/trainer"},
        "job": {"name": "run-a", "api": api, **job},
    }
    if metrics:
        values["metrics"] = metrics
    return parse_settings(values, stack="dev")


def job_of(variant: str) -> dict[str, Any]:
    if variant == "elastic":
        return {"nodes": 3, "elastic": {"minNodes": 1}}
    return VARIANTS[variant]


def containers(settings: StackSettings) -> list[dict[str, Any]]:
    """The training container of every pod the job's controller makes from the stack's
    objects."""
    return [pod_templates.training_container(pod) for pod in pod_templates.pods(settings, IMAGE)]


@pytest.mark.parametrize(("api", "variant"), CASES, ids=[f"{a}-{v}" for a, v in CASES])
def test_every_training_container_is_told_the_port_and_has_it_named_metrics(
    api: str, variant: str
) -> None:
    settings = settings_for(api, job_of(variant), enabled=True, port=PORT)
    found = containers(settings)
    assert found
    metrics = {"name": METRICS_PORT_NAME, "containerPort": PORT, "protocol": "TCP"}
    for container in found:
        assert pod_templates.env_of(container)[METRICS_PORT_ENV] == str(PORT)
        if api == "pytorchjob":
            # Beside the operator's rendezvous port, which it still finds by its name.
            assert container["ports"] == [
                {"name": PORT_NAME, "containerPort": MASTER_PORT, "protocol": "TCP"},
                metrics,
            ]
        else:
            # The runtime's port, then the torch plugin's (Trainer's UpsertPort).
            assert container["ports"] == [metrics, {"containerPort": TRAINER_PORT}]


@pytest.mark.parametrize(("api", "variant"), CASES, ids=[f"{a}-{v}" for a, v in CASES])
def test_without_metrics_no_container_has_the_port_or_the_variable(api: str, variant: str) -> None:
    for settings in (
        settings_for(api, job_of(variant)),
        # The other keys say nothing while metrics are off.
        settings_for(api, job_of(variant), port=PORT, scrapeFrom=["prometheus"], interval="5s"),
    ):
        assert contract_env(settings) == [
            {"name": "CHECKPOINT_DIR", "value": settings.checkpoint_dir},
            {"name": "JOB_NAME", "value": "run-a"},
            {"name": "STACK_NAME", "value": "dev"},
        ]
        assert metrics_ports(settings) == []
        for container in containers(settings):
            assert METRICS_PORT_ENV not in pod_templates.env_of(container)
            names = [port.get("name") for port in container.get("ports", [])]
            assert METRICS_PORT_NAME not in names


def test_the_variable_is_the_contracts_last_and_the_port_its_default() -> None:
    settings = settings_for("pytorchjob", {}, enabled=True)
    assert contract_env(settings)[-1] == {"name": METRICS_PORT_ENV, "value": "9450"}
    assert metrics_ports(settings) == [
        {"name": "metrics", "containerPort": 9450, "protocol": "TCP"}
    ]
    # The name the NetworkPolicy and the PodMonitor give the port is a valid port name.
    assert IANA_PORT_NAME.match(METRICS_PORT_NAME)


def without_metrics(value: Any) -> Any:
    """A manifest without the metrics' env entry and container port."""
    if isinstance(value, dict):
        return {key: without_metrics(item) for key, item in value.items()}
    if isinstance(value, list):
        return [
            without_metrics(item)
            for item in value
            if not (
                isinstance(item, dict) and item.get("name") in (METRICS_PORT_ENV, METRICS_PORT_NAME)
            )
        ]
    return value


@pytest.mark.parametrize("api", APIS)
def test_only_the_environment_and_the_ports_change(api: str) -> None:
    """Turning metrics on changes the containers' env and ports and nothing else of the job (and,
    for a TrainJob, its runtime's `node` container, and so the runtime's name)."""
    on = stack_objects(settings_for(api, {}, enabled=True), image=IMAGE, password=None)
    off = stack_objects(settings_for(api, {}), image=IMAGE, password=None)
    assert [m["kind"] for m in on.in_apply_order()] == [m["kind"] for m in off.in_apply_order()]
    assert on.claim == off.claim
    if api == "pytorchjob":
        assert on.job != off.job
        assert without_metrics(on.job) == off.job
        return
    assert on.runtime is not None and off.runtime is not None
    new_name, old_name = on.runtime["metadata"]["name"], off.runtime["metadata"]["name"]
    assert new_name != old_name  # the runtime's name is a digest of its spec
    job = without_metrics(on.job)
    assert job["spec"]["runtimeRef"]["name"] == new_name
    job["spec"]["runtimeRef"]["name"] = old_name
    assert job == off.job
    runtime = without_metrics(on.runtime)
    replicated = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    node = replicated["template"]["spec"]["template"]["spec"]["containers"][0]
    assert node == {"name": "node", "ports": []}
    del node["ports"]
    runtime["metadata"]["name"] = old_name
    assert runtime == off.runtime


def test_a_trainjobs_port_is_its_runtimes_and_never_in_the_runtime_patch() -> None:
    """Trainer v2.3.0's ContainerPatch has name, env, volumeMounts and securityContext only: the
    port goes on the stack's TrainingRuntime, the variable in `spec.trainer.env`."""
    settings = settings_for("trainjob", {}, enabled=True, port=PORT)
    objects = stack_objects(settings, image=IMAGE, password=None)
    assert objects.runtime is not None
    replicated = objects.runtime["spec"]["template"]["spec"]["replicatedJobs"]
    [node] = replicated[0]["template"]["spec"]["template"]["spec"]["containers"]
    assert node == {"name": "node", "ports": metrics_ports(settings)}
    trainer = objects.job["spec"]["trainer"]
    assert {"name": METRICS_PORT_ENV, "value": str(PORT)} in trainer["env"]
    for patch in objects.job["spec"]["runtimePatches"]:
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            for container in job["template"]["spec"]["template"]["spec"]["containers"]:
                assert set(container) <= {"name", "env", "volumeMounts", "securityContext"}


@pytest.mark.parametrize("api", APIS)
def test_everything_validates_and_stays_restricted_with_metrics(api: str) -> None:
    settings = settings_for(api, {}, enabled=True, podMonitor=True)
    objects = stack_objects(settings, image=IMAGE, password=None)
    for manifest in objects.in_apply_order():
        if manifest["apiVersion"].startswith("trainer.kubeflow.org"):
            continue  # custom resources: their pods are checked below
        validate_manifest(manifest)
    for index, pod in enumerate(pod_templates.pods(settings, IMAGE)):
        validate_core(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"p{index}"},
                "template": {"metadata": pod["metadata"], "spec": pod["spec"]},
            }
        )
    for manifest in (objects.job, objects.runtime):
        if manifest is not None:
            assert restricted_violations(manifest) == [], manifest["kind"]


def test_settings_derived_in_code_keep_the_port() -> None:
    """The local runner derives settings with dataclasses.replace: the port follows them."""
    settings = settings_for("pytorchjob", {}, enabled=True)
    moved = dataclasses.replace(settings, metrics=dataclasses.replace(settings.metrics, port=PORT))
    assert contract_env(moved)[-1] == {"name": METRICS_PORT_ENV, "value": str(PORT)}
