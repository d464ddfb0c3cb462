"""builders/manifests.py and both job APIs with checkpoints in object storage (issue 33,
`checkpoints.storage: s3`): no claim and no mount, the trainer's `--checkpoint-dir` and the pods'
CHECKPOINT_DIR the run's s3:// URL, and the client's environment (endpoint, region, credentials
from the stack's Secret) on a PyTorchJob's pods and a TrainJob's alike, the trainer's and your
own code's."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from builders.manifests import (
    CHECKPOINT_VOLUME,
    checkpoint_claim_manifest,
    checkpoint_reader_pod_manifest,
    pod_security_context,
    resource_names,
    storage_env,
    storage_secret_manifest,
    trainer_args,
)
from builders.stack_objects import stack_objects
from settings.stack import REDACTED, StackSettings, parse_settings
from tests.builders import pod_templates
from tests.builders.k8s_rules import restricted_violations, validate_manifest

IMAGE = "registry.example.com/ml/trainer@sha256:" + "e" * 64
S3: dict[str, Any] = {
    "storage": "s3",
    "bucket": "team-ckpt",
    "prefix": "runs/vision",
    "endpoint": "https://minio.example.com:9000",
    "region": "eu-central-1",
}
CREDENTIALS = {"accessKeyId": REDACTED, "secretAccessKey": REDACTED}
URL = "s3://team-ckpt/runs/vision/run-s3"
API = pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])


def settings_for(api: str = "pytorchjob", job: dict[str, Any] | None = None, **checkpoints: Any):
    values = {
        "image": {"repository": "registry.example.com/ml/trainer"},
        "checkpoints": {**S3, **checkpoints},
        "job": {"name": "run-s3", "api": api, **(job or {})},
    }
    return parse_settings(values, stack="s3")


def pods(settings: StackSettings) -> list[dict[str, Any]]:
    return pod_templates.pods(settings, IMAGE)


def secret_ref(key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": "run-s3-s3-credentials", "key": key}}


@API
def test_no_claim_is_made_or_mounted(api: str) -> None:
    settings = settings_for(api, **CREDENTIALS)
    objects = stack_objects(settings, image=IMAGE, password=None)
    assert objects.claim is None
    assert resource_names(settings).claim is None
    kinds = [manifest["kind"] for manifest in objects.in_apply_order()]
    assert "PersistentVolumeClaim" not in kinds
    for pod in pods(settings):
        spec = pod["spec"]
        assert [volume["name"] for volume in spec["volumes"]] == ["dshm"]
        assert CHECKPOINT_VOLUME not in {
            m["name"] for m in pod_templates.training_container(pod)["volumeMounts"]
        }
        assert "affinity" not in spec
        # The pods' groups are the claim stack's: nothing for the kubelet to chown, nothing lost.
        assert spec["securityContext"] == pod_security_context(settings)
        assert spec["securityContext"]["fsGroup"] == 10001
    assert checkpoint_claim_manifest(settings) is None


@API
def test_the_trainer_and_your_own_code_are_told_the_runs_url_and_how_to_reach_it(
    api: str,
) -> None:
    for job in ({}, {"command": ["train.py"]}):
        settings = settings_for(api, job, **CREDENTIALS)
        for pod in pods(settings):
            env = pod_templates.env_of(pod_templates.training_container(pod))
            assert env["CHECKPOINT_DIR"] == URL == settings.checkpoint_dir
            assert env["AWS_ENDPOINT_URL_S3"] == "https://minio.example.com:9000"
            assert env["AWS_DEFAULT_REGION"] == "eu-central-1"
            assert env["AWS_ACCESS_KEY_ID"] == secret_ref("AWS_ACCESS_KEY_ID")
            assert env["AWS_SECRET_ACCESS_KEY"] == secret_ref("AWS_SECRET_ACCESS_KEY")


@API
def test_without_credentials_or_endpoint_the_pods_use_their_identity_and_aws(api: str) -> None:
    settings = settings_for(api, endpoint=None)
    assert storage_secret_manifest(settings) is None
    assert stack_objects(settings, image=IMAGE, password=None).storage_secret is None
    for pod in pods(settings):
        env = pod_templates.env_of(pod_templates.training_container(pod))
        assert env["AWS_DEFAULT_REGION"] == "eu-central-1"
        assert not {"AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(env)


@API
def test_the_trainers_checkpoint_dir_is_the_url_and_it_creates_the_bucket_when_told(
    api: str,
) -> None:
    for pod in pods(settings_for(api)):
        args = pod_templates.training_container(pod)["args"]
        assert args[args.index("--checkpoint-dir") + 1] == URL
        assert "--create-bucket" not in args
    for pod in pods(settings_for(api, createBucket=True)):
        args = pod_templates.training_container(pod)["args"]
        # A switch: the flag alone, no value after it.
        assert args[args.index("--create-bucket") :] == ["--create-bucket"]


def test_a_claim_stacks_args_never_carry_the_switch() -> None:
    claim = parse_settings({"image": {"repository": "registry.example.com/ml/trainer"}})
    assert "--create-bucket" not in trainer_args(claim)


def test_the_credentials_secret_holds_both_keys_as_the_settings_do() -> None:
    settings = settings_for(**CREDENTIALS)
    manifest = storage_secret_manifest(settings)
    assert manifest is not None
    assert manifest["metadata"]["name"] == "run-s3-s3-credentials"
    assert manifest["type"] == "Opaque"
    assert {key: base64.b64decode(value).decode() for key, value in manifest["data"].items()} == {
        "AWS_ACCESS_KEY_ID": REDACTED,
        "AWS_SECRET_ACCESS_KEY": REDACTED,
    }
    objects = stack_objects(settings, image=IMAGE, password=None)
    assert objects.storage_secret == manifest
    order = objects.in_apply_order()
    assert order.index(manifest) < order.index(objects.job)
    assert [entry["name"] for entry in storage_env(settings)] == [
        "AWS_ENDPOINT_URL_S3",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ]


@API
def test_an_s3_stacks_objects_are_valid_and_its_pods_restricted(api: str) -> None:
    settings = settings_for(api, **CREDENTIALS)
    objects = stack_objects(settings, image=IMAGE, password=None)
    for manifest in objects.in_apply_order():
        # Trainer v2's kinds have no schema in kubernetes-validate: the pods' rules below.
        if not manifest["apiVersion"].startswith("trainer.kubeflow.org/"):
            validate_manifest(manifest)
    for manifest in (objects.job, objects.runtime):
        if manifest is not None:
            assert restricted_violations(manifest) == [], manifest["kind"]


def test_the_claim_reader_pod_has_no_claim_to_read_on_s3() -> None:
    with pytest.raises(ValueError, match=re.escape(f"read {URL} directly")):
        checkpoint_reader_pod_manifest(
            settings_for(),
            name="reader",
            image=IMAGE,
            pull_secret=None,
            node=None,
            deadline_seconds=60,
        )
