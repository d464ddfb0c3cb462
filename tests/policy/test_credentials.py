"""registry-secret-type and no-plaintext-credentials."""

from __future__ import annotations

import base64
import json

import pytest

from policy.rules.credentials import (
    is_credential_name,
    no_plaintext_credentials,
    registry_secret_type,
)
from policy.rules.model import DOCKER_IMAGE_TYPE, PYTORCHJOB_TYPE, SECRET_TYPE, UNKNOWN
from tests.policy import samples

CONFIG_MAP_TYPE = "kubernetes:core/v1:ConfigMap"
MASTER = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"


def master_container(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


# registry-secret-type


def test_compliant_registry_secret_passes() -> None:
    assert registry_secret_type(samples.stack()) == []
    assert no_plaintext_credentials(SECRET_TYPE, samples.registry_secret()) == []


def test_string_data_form_passes() -> None:
    secret = samples.registry_secret()
    secret["stringData"] = {".dockerconfigjson": samples.docker_config()}
    del secret["data"]
    assert registry_secret_type(samples.stack(secret=secret)) == []


def test_opaque_secret_with_docker_config_fires_twice() -> None:
    # once for the secret itself, once because the job pulls with it
    violations = registry_secret_type(
        samples.stack(secret=samples.registry_secret(secret_type="Opaque"))
    )
    assert [v.urn for v in violations] == ["urn:sec", "urn:sec"]
    assert violations[0].message == (
        "Secret 'ddp-registry' holds registry credentials but its type is 'Opaque'; "
        "use kubernetes.io/dockerconfigjson"
    )
    assert violations[1].message.startswith("PyTorchJob 'ddp' pulls with Secret 'ddp-registry'")


def test_legacy_dockercfg_type_fires() -> None:
    secret = samples.registry_secret(secret_type="kubernetes.io/dockercfg")
    messages = [v.message for v in registry_secret_type(samples.stack(secret=secret))]
    assert "legacy type kubernetes.io/dockercfg" in messages[0]


def test_unrelated_opaque_secret_passes() -> None:
    secret = {"metadata": {"name": "wandb"}, "type": "Opaque", "data": {"key": "eHl6"}}
    assert registry_secret_type(samples.stack(secret=secret)) == []


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, "has no '.dockerconfigjson' key"),
        ({".dockerconfigjson": "not base64!"}, "is not base64-encoded JSON"),
        (
            {".dockerconfigjson": base64.b64encode(json.dumps({"x": 1}).encode()).decode()},
            "is not a docker config with an 'auths' map",
        ),
    ],
)
def test_malformed_dockerconfigjson_fires(data: dict, expected: str) -> None:
    secret = samples.registry_secret()
    secret["data"] = data
    [violation] = registry_secret_type(samples.stack(secret=secret))
    assert expected in violation.message


def test_secret_data_unknown_during_preview_does_not_fire() -> None:
    secret = samples.registry_secret()
    secret["data"] = {".dockerconfigjson": UNKNOWN}
    assert registry_secret_type(samples.stack(secret=secret)) == []


# no-plaintext-credentials


def test_compliant_job_passes() -> None:
    assert no_plaintext_credentials(PYTORCHJOB_TYPE, samples.pytorchjob()) == []


def test_literal_token_env_fires_and_secret_ref_passes() -> None:
    job = samples.pytorchjob()
    master_container(job)["env"].append({"name": "HF_TOKEN", "value": "abc123"})
    assert no_plaintext_credentials(PYTORCHJOB_TYPE, job) == [
        f"{MASTER}.env[1] (HF_TOKEN) has a plain value but its name says it is a credential; "
        "use valueFrom.secretKeyRef (the stack's job.secretEnv.HF_TOKEN, not job.env)"
    ]
    master_container(job)["env"][1] = {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    }
    assert no_plaintext_credentials(PYTORCHJOB_TYPE, job) == []


@pytest.mark.parametrize(
    "args",
    [["--password", "hunter2"], ["--token=abc"], ["--api-key", "k"]],
)
def test_credential_on_the_command_line_fires(args: list[str]) -> None:
    job = samples.pytorchjob()
    master_container(job)["args"] = ["--", *args]
    [message] = no_plaintext_credentials(PYTORCHJOB_TYPE, job)
    assert message.startswith(f"{MASTER}.args[1] passes")


def test_credential_flag_reading_an_env_var_passes() -> None:
    job = samples.pytorchjob()
    master_container(job)["args"] = ["--token", "$(HF_TOKEN)"]
    assert no_plaintext_credentials(PYTORCHJOB_TYPE, job) == []


def test_docker_config_in_a_config_map_fires() -> None:
    props = {"metadata": {"name": "cfg"}, "data": {"config.json": samples.docker_config()}}
    assert no_plaintext_credentials(CONFIG_MAP_TYPE, props) == [
        "data.config.json contains a docker registry config; keep it in a Secret"
    ]


def test_password_key_in_a_config_map_fires() -> None:
    props = {"data": {"DB_PASSWORD": "x"}}
    assert no_plaintext_credentials(CONFIG_MAP_TYPE, props) == [
        "data.DB_PASSWORD holds a literal credential; keep it in a Secret"
    ]


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("ghp_" + "a1" * 18, "a GitHub token"),
        ("AKIA" + "ABCDEFGH12345678", "an AWS access key id"),
        ("postgres://ml:pw@db:5432/runs", "a password in a URL"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMII", "a private key"),
    ],
)
def test_known_credential_formats_fire_anywhere(value: str, kind: str) -> None:
    job = samples.pytorchjob()
    job["metadata"]["labels"] = {"note": value}
    assert no_plaintext_credentials(PYTORCHJOB_TYPE, job) == [
        f"metadata.labels.note contains {kind}; keep it in a Secret"
    ]


def test_provider_secret_fields_are_allowed_but_nothing_else() -> None:
    image = {
        "imageName": "registry.example.com/ml/trainer:abc",
        "registry": {"server": "registry.example.com", "username": "u", "password": "p"},
    }
    assert no_plaintext_credentials(DOCKER_IMAGE_TYPE, image) == []
    image["build"] = {"args": {"NGC_API_KEY": "nvapi-" + "x" * 30}}
    assert no_plaintext_credentials(DOCKER_IMAGE_TYPE, image) == [
        "build.args.NGC_API_KEY holds a literal credential; keep it in a Secret"
    ]


def test_secret_metadata_is_still_scanned() -> None:
    secret = samples.registry_secret()
    secret["metadata"]["annotations"] = {"token": "abc"}
    assert no_plaintext_credentials(SECRET_TYPE, secret) == [
        "metadata.annotations.token holds a literal credential; keep it in a Secret"
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("WANDB_API_KEY", True),
        ("registryPassword", True),
        ("auth", True),
        ("HF_TOKEN", True),
        ("secretName", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("OMP_NUM_THREADS", False),
    ],
)
def test_credential_names(name: str, expected: bool) -> None:
    assert is_credential_name(name) is expected


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("HF_TOKEN", True),
        ("WANDB_API_KEY", True),
        ("DB_PASSWORD", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("OPENAI_APIKEY", True),
        ("hf-token", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("KEYBOARD_LAYOUT", False),
        ("DATA_DIR", False),
    ],
)
def test_an_env_name_that_says_credential_may_not_hold_a_plain_value(
    name: str, credential: bool
) -> None:
    """The stack's job.env: *TOKEN*, *KEY*, *PASSWORD*, *SECRET* as words of the name, whatever
    the value looks like."""
    job = samples.pytorchjob()
    master_container(job)["env"].append({"name": name, "value": "false"})
    found = no_plaintext_credentials(PYTORCHJOB_TYPE, job)
    assert bool(found) is credential, found
    master_container(job)["env"][-1] = {
        "name": name,
        "valueFrom": {"secretKeyRef": {"name": "job-env", "key": name}},
    }
    assert no_plaintext_credentials(PYTORCHJOB_TYPE, job) == []
