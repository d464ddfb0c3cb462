"""The program under mocks with checkpoints in object storage (issue 33, `checkpoints.storage:
s3`), on both job APIs: no claim at all, the credentials a secret in the stack's Secret only
(never in plain text in what the engine records, its preview, the outputs or an error), the pods
reading them by reference, and the outputs naming the run's s3:// URL and no claim."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.components.s3_stack import (
    BUCKET,
    ENDPOINT,
    KEY_ID,
    PREFIX,
    S3_CHECKPOINTS,
    S3_CREDENTIALS,
    SECRET_KEY,
)
from tests.pulumi_harness import ProgramResult, RegisteredResource, Secret, plain_text
from tests.pulumi_harness import run_program as run_stack

PVC = "kubernetes:core/v1:PersistentVolumeClaim"
SECRET = "kubernetes:core/v1:Secret"
COMPONENT = "pytorch-distributed:index:"
JOBS = {
    "dev": ("kubernetes:kubeflow.org/v1:PyTorchJob", "ddp-dev"),
    "trainjob": ("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob", "ddp-trainjob"),
}


def run_program(
    stack: str,
    *,
    preview: bool = False,
    secret_paths: dict[str, str] | None = S3_CREDENTIALS,
    **more: Any,
) -> ProgramResult:
    return run_stack(
        stack,
        overrides={"checkpoints": {**S3_CHECKPOINTS, **more}},
        secret_paths=secret_paths,
        preview=preview,
    )


@pytest.fixture(scope="module", params=sorted(JOBS))
def s3(request: pytest.FixtureRequest) -> tuple[str, ProgramResult]:
    result = run_program(request.param)
    assert result.error is None, result.error
    return request.param, result


def training_envs(stack: str, job: RegisteredResource) -> list[dict[str, Any]]:
    """The training container's env of each replica type (a TrainJob's trainer has one)."""
    spec = job.inputs["spec"]
    if stack == "trainjob":
        return [{entry["name"]: entry for entry in spec["trainer"]["env"]}]
    return [
        {entry["name"]: entry for entry in replica["template"]["spec"]["containers"][0]["env"]}
        for replica in spec["pytorchReplicaSpecs"].values()
    ]


def assert_never_plain(result: ProgramResult) -> None:
    for value in (KEY_ID, SECRET_KEY):
        encoded = base64.b64encode(value.encode()).decode()
        for text in plain_text(result):
            assert value not in text and encoded not in text, text[:200]


def test_no_claim_is_created_or_mounted(s3: tuple[str, ProgramResult]) -> None:
    stack, result = s3
    assert not result.of_type(PVC)
    assert not result.of_type(COMPONENT + "CheckpointVolume")
    job = result.one(JOBS[stack][0])
    assert "persistentVolumeClaim" not in json.dumps(job.inputs)
    assert '"/checkpoints"' not in json.dumps(job.inputs)


def test_the_credentials_are_in_the_stacks_secret_only_and_only_as_secrets(
    s3: tuple[str, ProgramResult],
) -> None:
    stack, result = s3
    job_type, job_name = JOBS[stack]
    [component] = [
        resource
        for resource in result.of_type(COMPONENT + "StackSecret")
        if resource.name == "training-storage-credentials"
    ]
    [secret] = [resource for resource in result.of_type(SECRET) if resource.parent == component.urn]
    assert secret.name == "training-storage-credentials-secret"
    assert secret.inputs["metadata"]["name"] == f"{job_name}-s3-credentials"
    assert isinstance(secret.inputs["data"], Secret)
    assert {"data", "stringData"} <= set(secret.additional_secret_outputs)
    data = secret.plain_inputs()["data"]
    assert {key: base64.b64decode(value).decode() for key, value in data.items()} == {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    job = result.one(job_type)
    assert secret.urn in job.dependencies
    for env in training_envs(stack, job):
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert env[key] == {
                "name": key,
                "valueFrom": {"secretKeyRef": {"name": f"{job_name}-s3-credentials", "key": key}},
            }
    assert_never_plain(result)


def test_the_pods_are_told_the_runs_url_and_the_service(s3: tuple[str, ProgramResult]) -> None:
    stack, result = s3
    job_type, job_name = JOBS[stack]
    url = f"s3://{BUCKET}/{PREFIX}/{job_name}"
    for env in training_envs(stack, result.one(job_type)):
        assert env["CHECKPOINT_DIR"]["value"] == url
        assert env["AWS_ENDPOINT_URL_S3"]["value"] == ENDPOINT
        assert env["AWS_DEFAULT_REGION"]["value"] == "us-east-1"
    job = result.one(job_type).inputs["spec"]
    args = (
        job["trainer"]["args"]
        if stack == "trainjob"
        else job["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"]
    )
    assert args[args.index("--checkpoint-dir") + 1] == url


def test_the_outputs_name_the_runs_url_and_no_claim(s3: tuple[str, ProgramResult]) -> None:
    stack, result = s3
    job_name = JOBS[stack][1]
    assert result.outputs["checkpointPath"].value == f"s3://{BUCKET}/{PREFIX}/{job_name}"
    assert result.outputs["claimName"].value is None
    assert not any(output.secret for output in result.outputs.values())


def test_a_preview_shows_no_credential_either() -> None:
    result = run_program("dev", preview=True)
    assert result.error is None, result.error
    assert_never_plain(result)


def test_without_credentials_the_pods_use_their_own_identity() -> None:
    result = run_program("dev", secret_paths=None)
    assert result.error is None, result.error
    assert not result.of_type(SECRET) and not result.of_type(PVC)
    for env in training_envs("dev", result.one(JOBS["dev"][0])):
        assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env


def test_credentials_the_config_does_not_hold_as_secrets_stop_the_program() -> None:
    """`--path` without `--secret`: the engine marks no key secret, and the program refuses
    them before any resource, without echoing them."""
    result = run_program("dev", secret_paths=None, accessKeyId=KEY_ID, secretAccessKey=SECRET_KEY)
    assert result.error is not None
    message = str(result.error)
    assert "pytorch-distributed:checkpoints.accessKeyId = '<redacted>'" in message
    assert "pulumi config set --secret --path checkpoints.accessKeyId" in message
    assert KEY_ID not in message and SECRET_KEY not in message
    assert not [resource for resource in result.resources if resource.custom]


def test_fsdp_on_s3_is_a_stack_like_any_other() -> None:
    """Sharded checkpoints go through the trainer's storage seam, so a bucket serves them too."""
    result = run_stack(
        "dev", overrides={"checkpoints": S3_CHECKPOINTS, "job": {"parallelism": "fsdp"}}
    )
    assert result.error is None
    assert [resource for resource in result.resources if resource.custom]
