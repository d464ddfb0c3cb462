"""The program under mocks with your own code (the example stack, Pulumi.digits.yaml): the image
built from its own context, the pods running its script, and `job.secretEnv` as the CLI hands
it, a secret in the stack's Secret only, never in plain text in what the engine records (its
state and preview), in the stack outputs, or in an error."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from components.training_image import context_tag
from tests.pulumi_harness import (
    REPO_ROOT,
    ProgramResult,
    RegisteredResource,
    Secret,
    plain_text,
    run_program,
)

TOKEN = "hf_e2e-not-real-8d1c4b"
SECRET_PATHS = {"job.secretEnv.HF_TOKEN": TOKEN}
JOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
SECRET = "kubernetes:core/v1:Secret"
IMAGE = "docker:index/image:Image"
COMPONENT = "pytorch-distributed:index:"


@pytest.fixture(scope="module")
def digits() -> ProgramResult:
    result = run_program("digits", secret_paths=SECRET_PATHS)
    assert result.error is None, result.error
    return result


def training_container(job: RegisteredResource, replica: str = "Master") -> dict[str, Any]:
    spec = job.inputs["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
    [container] = spec["containers"]
    return container


def assert_never_plain(result: ProgramResult, value: str) -> None:
    encoded = base64.b64encode(value.encode()).decode()
    for text in plain_text(result):
        assert value not in text and encoded not in text, text[:200]


def test_the_image_is_built_from_the_examples_own_context(digits: ProgramResult) -> None:
    image = digits.one(IMAGE).inputs
    assert image["build"]["context"] == "examples/digits"
    assert image["build"]["dockerfile"] == "examples/digits/Dockerfile"
    context = REPO_ROOT / "examples" / "digits"
    assert image["imageName"] == (
        f"localhost:5001/digits-example:{context_tag(context, context / 'Dockerfile', {})}"
    )
    # The same pin as for the trainer's image: the digest its registry serves.
    assert training_container(digits.one(JOB))["image"] == digits.outputs["image"].value
    # And the same cleanup of what the build leaves in the engine, whatever the context.
    assert digits.one(IMAGE).hooks == {
        "before_create": ["training-image-image-store-before"],
        "before_update": ["training-image-image-store-before"],
        "after_create": ["training-image-image-leftovers"],
        "after_update": ["training-image-image-leftovers"],
    }


def test_build_arguments_reach_the_build_beside_the_base_image() -> None:
    result = run_program(
        "digits",
        overrides={"image": {"buildArgs": {"PIP_INDEX_URL": "https://pypi.example/simple"}}},
    )
    assert result.error is None, result.error
    image = result.one(IMAGE).inputs
    assert image["build"]["args"] == {
        "BASE_IMAGE": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "PIP_INDEX_URL": "https://pypi.example/simple",
    }
    # Another build, another tag: the arguments are part of what the image is.
    context = REPO_ROOT / "examples" / "digits"
    assert image["imageName"].endswith(
        context_tag(
            context, context / "Dockerfile", {"PIP_INDEX_URL": "https://pypi.example/simple"}
        )
    )


def test_the_environments_secret_is_the_one_place_its_value_is_and_only_as_a_secret(
    digits: ProgramResult,
) -> None:
    component = digits.one(COMPONENT + "StackSecret")
    secret = digits.one(SECRET)
    assert secret.parent == component.urn
    assert secret.inputs["metadata"]["name"] == "digits-env"
    assert isinstance(secret.inputs["data"], Secret)
    assert {"data", "stringData"} <= set(secret.additional_secret_outputs)
    assert base64.b64decode(secret.plain_inputs()["data"]["HF_TOKEN"]).decode() == TOKEN
    job = digits.one(JOB)
    assert secret.urn in job.dependencies
    env = {e["name"]: e for e in training_container(job)["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "digits-env", "key": "HF_TOKEN"}},
    }
    assert_never_plain(digits, TOKEN)


def test_a_preview_shows_no_secret_value_either() -> None:
    result = run_program("digits", secret_paths=SECRET_PATHS, preview=True)
    assert result.error is None, result.error
    assert_never_plain(result, TOKEN)


def test_a_secret_env_value_the_config_does_not_hold_as_a_secret_stops_the_program() -> None:
    """A plain value under job.secretEnv (`--path` without `--secret`): the engine marks no key
    secret, and the program refuses it before any resource, without echoing it."""
    result = run_program("digits", overrides={"job": {"secretEnv": {"HF_TOKEN": TOKEN}}})
    assert result.resources == []
    assert result.error is not None
    message = str(result.error)
    assert "pytorch-distributed:job.secretEnv.HF_TOKEN = '<redacted>'" in message
    assert "pulumi config set --secret --path job.secretEnv.HF_TOKEN" in message
    assert TOKEN not in message


def test_the_pods_run_the_script_on_tolerated_nodes_with_the_data_claim(
    digits: ProgramResult,
) -> None:
    job = digits.one(JOB)
    for replica in ("Master", "Worker"):
        container = training_container(job, replica)
        assert container["command"] == ["torchrun"]
        assert container["args"] == ["--max-restarts", "0", "train.py", "--epochs", "30"]
        pod = job.inputs["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        assert pod["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        claims = {
            v["persistentVolumeClaim"]["claimName"]: v
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        }
        assert claims["digits-data"]["persistentVolumeClaim"]["readOnly"] is True
    # The data claim is the namespace's, not the stack's: only the checkpoint claim is declared.
    claims = digits.of_type("kubernetes:core/v1:PersistentVolumeClaim")
    assert [claim.inputs["metadata"]["name"] for claim in claims] == ["digits-checkpoints"]
