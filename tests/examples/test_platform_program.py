"""examples/platform-program: another team's program builds the training environment from typed
arguments with its own Kubernetes provider, and gets exactly what this repository's stack of the
same settings declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.examples.programs import environment_resources, is_kubernetes_object, stack_file
from tests.pulumi_harness import ProgramResult, run_program

EXAMPLE = REPO_ROOT / "examples" / "platform-program"
# The example's arguments, as this repository's stack file would write them.
SAME_SETTINGS = {
    "namespace": "default",
    "image": {
        "build": False,
        "ref": "ghcr.io/example/pytorch-distributed-trainer@sha256:" + "0" * 64,
    },
    "checkpoints": {"size": "1Gi", "accessMode": "ReadWriteOnce", "retainOnDestroy": False},
    "job": {
        "name": "platform-ddp",
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


@pytest.fixture(scope="module")
def example() -> ProgramResult:
    result = run_program(
        EXAMPLE / "Pulumi.dev.yaml", program=EXAMPLE / "__main__.py", project="platform-program"
    )
    assert result.error is None, result.error
    return result


def test_the_example_declares_what_the_repository_stack_of_the_same_settings_does(
    example: ProgramResult, tmp_path: Path
) -> None:
    own = run_program(stack_file(tmp_path, "dev", SAME_SETTINGS))
    assert environment_resources(example) == environment_resources(own)
    assert {resource.type for resource in example.resources} >= {
        "kubernetes:kubeflow.org/v1:PyTorchJob",
        "kubernetes:core/v1:PersistentVolumeClaim",
    }


def test_every_object_goes_through_the_programs_own_provider(example: ProgramResult) -> None:
    providers = [
        resource for resource in example.resources if resource.type.startswith("pulumi:providers:")
    ]
    assert [(provider.type, provider.name) for provider in providers] == [
        ("pulumi:providers:kubernetes", "cluster")
    ]
    objects = [resource for resource in example.resources if is_kubernetes_object(resource)]
    assert objects
    for resource in objects:
        assert resource.provider.startswith(providers[0].urn + "::"), resource.name


def test_the_example_exports_the_components_outputs(example: ProgramResult) -> None:
    assert example.outputs["jobName"].value == "platform-ddp"
    assert example.outputs["checkpointPath"].value == "/checkpoints/platform-ddp"
    assert "kubectl --namespace default logs" in example.outputs["logsCommand"].value
