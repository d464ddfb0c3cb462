"""examples/stack-references: the cluster stack publishes the kubeconfig, namespace, registry and
storage class; the training stack reads them through a StackReference and declares what this
repository's stack of the same settings does, the secrets still secret."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.examples.programs import environment_resources, stack_file
from tests.pulumi_harness import ProgramResult, Secret, run_program

EXAMPLE = REPO_ROOT / "examples" / "stack-references"
CLUSTER_STACK = "organization/training-cluster/dev"
KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n# token: not-a-real-token\n"
PASSWORD = "registry-password-not-real"
CLUSTER_OUTPUTS = {
    "kubeconfig": KUBECONFIG,
    "namespace": "training",
    "registry": "registry.example.com",
    "registryUsername": "training-robot",
    "registryPassword": PASSWORD,
    "storageClass": "standard",
}
IMAGE = "registry.example.com/pytorch-distributed-trainer@sha256:" + "1" * 64
# The training stack's arguments, as this repository's stack file would write them.
SAME_SETTINGS = {
    "namespace": "training",
    "image": {"build": False, "ref": IMAGE},
    "registry": {"server": "registry.example.com", "username": "training-robot"},
    "checkpoints": {
        "size": "1Gi",
        "storageClass": "standard",
        "accessMode": "ReadWriteOnce",
        "retainOnDestroy": False,
    },
    "job": {
        "name": "referenced-ddp",
        "nodes": 2,
        "gpusPerNode": 0,
        "totalEpochs": 4,
        "saveEvery": 2,
        "datasetSize": 1024,
        "cpu": "1",
        "memory": "2Gi",
        "restartPolicy": "OnFailure",
    },
}


def run_training(preview: bool = False) -> ProgramResult:
    result = run_program(
        EXAMPLE / "training" / "Pulumi.dev.yaml",
        program=EXAMPLE / "training" / "__main__.py",
        project="training-job",
        preview=preview,
        other_stacks={CLUSTER_STACK: CLUSTER_OUTPUTS},
        secret_outputs={CLUSTER_STACK: ["kubeconfig", "registryPassword"]},
    )
    assert result.error is None, result.error
    return result


@pytest.fixture(scope="module")
def training() -> ProgramResult:
    return run_training()


def visible(value: Any) -> str:
    """Everything of a registered value that is not marked secret, as text."""

    def strip(item: Any) -> Any:
        if isinstance(item, Secret):
            return "[secret]"
        if isinstance(item, dict):
            return {key: strip(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [strip(inner) for inner in item]
        return item

    return json.dumps(strip(value))


def test_the_cluster_stack_exports_its_secrets_as_secrets() -> None:
    directory = EXAMPLE / "cluster"
    result = run_program(
        directory / "Pulumi.dev.yaml",
        program=directory / "__main__.py",
        project="training-cluster",
        secrets={"kubeconfig": KUBECONFIG, "registryPassword": PASSWORD},
    )
    assert result.error is None, result.error
    outputs = result.outputs
    assert {name for name, output in outputs.items() if output.secret} == {
        "kubeconfig",
        "registryPassword",
    }
    assert {name: output.value for name, output in outputs.items()} == CLUSTER_OUTPUTS
    provider = result.one("pulumi:providers:kubernetes")
    assert isinstance(provider.inputs["kubeconfig"], Secret)
    assert result.one("kubernetes:core/v1:Namespace").inputs["metadata"]["name"] == "training"


def test_the_training_stack_declares_what_the_repository_stack_of_the_same_settings_does(
    training: ProgramResult, tmp_path: Path
) -> None:
    own = run_program(
        stack_file(tmp_path, "dev", SAME_SETTINGS), secrets={"registryPassword": PASSWORD}
    )
    assert environment_resources(training) == environment_resources(own)
    assert training.outputs["image"].value == IMAGE


def test_the_preview_shows_every_object_too(training: ProgramResult) -> None:
    """The referenced outputs are known in a preview, so the deferred children are declared."""
    preview = run_training(preview=True)
    assert environment_resources(preview).keys() == environment_resources(training).keys()


def test_the_kubeconfig_and_the_password_stay_secret(training: ProgramResult) -> None:
    provider = training.one("pulumi:providers:kubernetes")
    assert isinstance(provider.inputs["kubeconfig"], Secret)
    encoded = base64.b64encode(PASSWORD.encode()).decode()
    for resource in training.resources:
        text = visible(resource.inputs)
        assert PASSWORD not in text and encoded not in text, resource.name
        assert "not-a-real-token" not in text, resource.name
    [pull_secret] = [
        resource
        for resource in training.of_type("kubernetes:core/v1:Secret")
        if resource.inputs.get("type") == "kubernetes.io/dockerconfigjson"
    ]
    assert isinstance(pull_secret.inputs["data"], Secret)
