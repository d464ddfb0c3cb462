"""tools.render: the manifests of each stack as YAML, schema-valid and free of secrets."""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from settings.stack import RegistrySettings, load_stack_file
from tests.builders.k8s_rules import validate_manifest
from tests.conftest import REPO_ROOT
from tools.render import PLACEHOLDER_DIGEST, render

FAKE_PASSWORD = "Fake-Registry-Pa55word-4-tests"


def run_render(stack: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.render", "--stack", stack, "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def load_dir(out: Path) -> dict[str, dict[str, Any]]:
    return {path.name: yaml.safe_load(path.read_text()) for path in sorted(out.glob("*.yaml"))}


def secret_spellings(secret: str, username: str) -> list[str]:
    """Every way a dockerconfigjson can carry a password: plain, base64, base64 of user:pass."""
    b64 = base64.b64encode
    return [
        secret,
        b64(secret.encode()).decode(),
        b64(f"{username}:{secret}".encode()).decode(),
    ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_rendered_object_validates_against_the_kubernetes_schemas(
    stack: str, tmp_path: Path
) -> None:
    result = run_render(stack, tmp_path)

    assert result.returncode == 0, result.stderr
    documents = load_dir(tmp_path)
    assert documents
    for document in documents.values():
        validate_manifest(document)


def test_prod_renders_policy_secret_claim_and_job_in_apply_order(tmp_path: Path) -> None:
    assert run_render("prod", tmp_path).returncode == 0

    assert sorted(load_dir(tmp_path)) == [
        "01-networkpolicy-pytorch-ddp-network.yaml",
        "02-secret-pytorch-ddp-registry.yaml",
        "03-persistentvolumeclaim-pytorch-ddp-checkpoints.yaml",
        "04-pytorchjob-pytorch-ddp.yaml",
    ]


def test_built_image_shows_repository_with_placeholder_digest(tmp_path: Path) -> None:
    assert run_render("dev", tmp_path).returncode == 0

    job = load_dir(tmp_path)["03-pytorchjob-ddp-dev.yaml"]
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        image = replica["template"]["spec"]["containers"][0]["image"]
        assert image == f"localhost:5001/pytorch-distributed-trainer@{PLACEHOLDER_DIGEST}"


def test_prebuilt_image_ref_is_used_as_is(tmp_path: Path) -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    ref = "registry.example.com/ml/trainer@sha256:" + "ab" * 32
    image = dataclasses.replace(settings.image, build=False, repository=None, ref=ref)

    render(dataclasses.replace(settings, image=image), tmp_path)

    job = load_dir(tmp_path)["03-pytorchjob-ddp-dev.yaml"]
    assert (
        job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"]
        == ref
    )


def test_no_secret_value_reaches_the_output(tmp_path: Path) -> None:
    settings = load_stack_file("prod", REPO_ROOT)
    assert settings.registry is not None
    # As if the settings held the real password (as the program's do): render must not use it.
    registry = RegistrySettings(settings.registry.server, settings.registry.username, FAKE_PASSWORD)

    render(dataclasses.replace(settings, registry=registry), tmp_path)

    text = "".join(path.read_text() for path in tmp_path.glob("*.yaml"))
    assert "02-secret-pytorch-ddp-registry.yaml" in load_dir(tmp_path)
    for spelling in secret_spellings(FAKE_PASSWORD, settings.registry.username):
        assert spelling not in text
    secret = load_dir(tmp_path)["02-secret-pytorch-ddp-registry.yaml"]
    decoded = base64.b64decode(secret["data"][".dockerconfigjson"]).decode()
    assert '"password": "<redacted>"' in decoded


def test_rendering_twice_is_byte_identical_and_drops_stale_files(tmp_path: Path) -> None:
    assert run_render("prod", tmp_path).returncode == 0
    first = {path.name: path.read_bytes() for path in tmp_path.glob("*.yaml")}
    (tmp_path / "09-configmap-left-over.yaml").write_text("kind: ConfigMap\n")

    assert run_render("prod", tmp_path).returncode == 0

    assert {path.name: path.read_bytes() for path in tmp_path.glob("*.yaml")} == first


def test_existing_claim_is_not_rendered(tmp_path: Path) -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    checkpoints = dataclasses.replace(settings.checkpoints, existing_claim="shared-checkpoints")

    render(dataclasses.replace(settings, checkpoints=checkpoints), tmp_path)

    assert sorted(load_dir(tmp_path)) == [
        "01-networkpolicy-ddp-dev-network.yaml",
        "02-pytorchjob-ddp-dev.yaml",
    ]


def test_unknown_stack_is_a_clear_error(tmp_path: Path) -> None:
    result = run_render("no-such-stack", tmp_path / "out")

    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: stack 'no-such-stack': no stack file {REPO_ROOT / 'Pulumi.no-such-stack.yaml'}; "
        f"the stacks in {REPO_ROOT} are dev, digits, digits-local, local, prod, trainjob"
    ]
    assert not (tmp_path / "out").exists()


def test_an_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_text("keep me")

    result = run_render("dev", out)

    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: --out = '{out}': File exists: {out}"]
    assert out.read_text() == "keep me"


def normalized(value: Any, image: str) -> Any:
    """Engine inputs carry numbers as floats and the real image; align both with the render."""
    if isinstance(value, dict):
        return {
            key: image if key == "image" else normalized(item, image) for key, item in value.items()
        }
    if isinstance(value, list):
        return [normalized(item, image) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_rendered_objects_are_what_the_program_registers(
    stack: str, tmp_path: Path, pulumi_program: Callable[..., Any]
) -> None:
    secrets = {"registryPassword": FAKE_PASSWORD} if stack == "prod" else None
    program = pulumi_program(stack, secrets=secrets)
    assert program.error is None
    assert run_render(stack, tmp_path).returncode == 0
    rendered = {
        (doc["kind"], doc["metadata"]["name"]): normalized(doc, "IMAGE")
        for doc in load_dir(tmp_path).values()
    }

    registered = {}
    for resource in program.resources:
        is_object = resource.type.startswith("kubernetes:") and "kind" in resource.inputs
        if resource.custom and is_object:
            inputs = normalized(resource.plain_inputs(), "IMAGE")
            registered[(inputs["kind"], inputs["metadata"]["name"])] = inputs

    assert rendered.keys() == registered.keys()
    for key, document in rendered.items():
        if key[0] == "Secret":
            # Same object apart from the credential, which only the program holds.
            mine = json.loads(base64.b64decode(document.pop("data")[".dockerconfigjson"]))
            theirs = json.loads(base64.b64decode(registered[key].pop("data")[".dockerconfigjson"]))
            for auth in (*mine["auths"].values(), *theirs["auths"].values()):
                del auth["password"], auth["auth"]
            assert mine == theirs
        assert document == registered[key]


def test_your_own_codes_secret_environment_renders_redacted_and_by_reference(
    tmp_path: Path, pulumi_program: Callable[..., Any]
) -> None:
    """The example stack with its HF_TOKEN set as `pulumi config set --secret --path` leaves it
    (the ciphertext in the stack file): the render holds neither the value nor the ciphertext,
    and is, but for the value, what the program registers."""
    stack_dir = tmp_path / "stacks"
    stack_dir.mkdir()
    document = yaml.safe_load((REPO_ROOT / "Pulumi.digits.yaml").read_text())
    ciphertext = "v1:AbCdEf0123456789ciphertext=="
    document["config"]["pytorch-distributed:job"]["secretEnv"] = {
        "HF_TOKEN": {"secure": ciphertext}
    }
    (stack_dir / "Pulumi.digits.yaml").write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tools.render", "--stack", "digits"),
            *("--stack-dir", str(stack_dir), "--out", str(out)),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    files = load_dir(out)
    assert list(files) == [
        "01-networkpolicy-digits-network.yaml",
        "02-secret-digits-env.yaml",
        "03-persistentvolumeclaim-digits-checkpoints.yaml",
        "04-pytorchjob-digits.yaml",
    ]
    text = "".join(path.read_text() for path in out.glob("*.yaml"))
    token = "hf_render-not-real-5e2a"
    for spelling in (ciphertext, token, base64.b64encode(token.encode()).decode()):
        assert spelling not in text
    secret = files["02-secret-digits-env.yaml"]
    assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == "<redacted>"
    for document in files.values():
        validate_manifest(document)
    container = files["04-pytorchjob-digits.yaml"]["spec"]["pytorchReplicaSpecs"]["Master"][
        "template"
    ]["spec"]["containers"][0]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "digits-env", "key": "HF_TOKEN"}},
    } in container["env"]

    program = pulumi_program("digits", secret_paths={"job.secretEnv.HF_TOKEN": token})
    assert program.error is None, program.error
    registered = {
        (inputs["kind"], inputs["metadata"]["name"]): normalized(inputs, "IMAGE")
        for resource in program.resources
        if resource.custom and "kind" in (inputs := resource.plain_inputs())
    }
    rendered = {(d["kind"], d["metadata"]["name"]): normalized(d, "IMAGE") for d in files.values()}
    assert rendered.keys() == registered.keys()
    for key, document in rendered.items():
        if key[0] == "Secret":
            assert base64.b64decode(registered[key].pop("data")["HF_TOKEN"]).decode() == token
            document.pop("data")
        assert document == registered[key]


def test_an_s3_stack_renders_no_claim_and_hides_its_credentials(tmp_path: Path) -> None:
    """Issue 33: the stack's Secret holds the marker, never the ciphertext (or a value), and the
    job reads it by reference; there is no claim to render."""
    stacks, out = tmp_path / "stacks", tmp_path / "out"
    stacks.mkdir()
    (stacks / "Pulumi.s3.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/ml/trainer}\n"
        "  pytorch-distributed:checkpoints:\n"
        "    storage: s3\n"
        "    bucket: team-ckpt\n"
        "    accessKeyId:\n"
        "      secure: AAABAKeyIdCiphertext\n"
        "    secretAccessKey:\n"
        "      secure: AAABASecretCiphertext\n"
        "  pytorch-distributed:job: {name: run-s3}\n",
        encoding="utf-8",
    )

    render(load_stack_file("s3", stacks), out)

    documents = load_dir(out)
    assert sorted(documents) == [
        "01-networkpolicy-run-s3-network.yaml",
        "02-secret-run-s3-s3-credentials.yaml",
        "03-pytorchjob-run-s3.yaml",
    ]
    secret = documents["02-secret-run-s3-s3-credentials.yaml"]
    assert {key: base64.b64decode(value).decode() for key, value in secret["data"].items()} == {
        "AWS_ACCESS_KEY_ID": "<redacted>",
        "AWS_SECRET_ACCESS_KEY": "<redacted>",
    }
    text = "".join(path.read_text() for path in out.glob("*.yaml"))
    assert "Ciphertext" not in text and "persistentVolumeClaim" not in text
    assert "s3://team-ckpt/run-s3" in text
    for document in documents.values():
        validate_manifest(document)
