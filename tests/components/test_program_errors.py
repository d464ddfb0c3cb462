"""Bad stack config stops the real program before it registers a single resource.

Each case changes one thing in a committed stack file and expects a pulumi.RunError (which the
CLI prints as one clean line, no traceback) naming the key, the value and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pulumi
import pytest

from tests.pulumi_harness import REPO_ROOT, run_program

PROD_SECRETS = {"registryPassword": "not-real"}

# (id, stack, overrides, secrets, key the message names, value the message shows or None)
CASES: list[tuple[str, str, dict[str, Any], dict[str, str] | None, str, str | None]] = [
    ("unknown-platform", "dev", {"platform": "slurm"}, None, "platform", "'slurm'"),
    ("runai-without-project", "dev", {"platform": "runai"}, None, "runaiProject", None),
    ("bad-namespace", "dev", {"namespace": "Team_A"}, None, "namespace", "'Team_A'"),
    ("typo-top-level", "dev", {"kubecontext": "kind"}, None, "kubecontext", "'kind'"),
    ("typo-job-epochs", "dev", {"job": {"epochs": 10}}, None, "job.epochs", "10"),
    ("nodes-wrong-type", "dev", {"job": {"nodes": "two"}}, None, "job.nodes", "'two'"),
    ("nodes-out-of-range", "dev", {"job": {"nodes": 0}}, None, "job.nodes", "0"),
    ("gpus-negative", "prod", {"job": {"gpusPerNode": -2}}, PROD_SECRETS, "job.gpusPerNode", "-2"),
    ("bad-job-name", "dev", {"job": {"name": "DDP_dev"}}, None, "job.name", "'DDP_dev'"),
    ("bad-wait-for", "dev", {"job": {"waitFor": "finished"}}, None, "job.waitFor", "'finished'"),
    ("bad-memory", "dev", {"job": {"memory": "2GB"}}, None, "job.memory", "'2GB'"),
    ("label-not-string", "dev", {"labels": {"team": 7}}, None, "labels.team", "7"),
    ("label-bad-name", "dev", {"labels": {"cost center": "a"}}, None, "labels.cost center", "'a'"),
    (
        "size-10TB",
        "prod",
        {"checkpoints": {"size": "10TB"}},
        PROD_SECRETS,
        "checkpoints.size",
        "'10TB'",
    ),
    (
        "bad-access-mode",
        "dev",
        {"checkpoints": {"accessMode": "RWX"}},
        None,
        "checkpoints.accessMode",
        "'RWX'",
    ),
    (
        "retain-not-bool",
        "dev",
        {"checkpoints": {"retainOnDestroy": "maybe"}},
        None,
        "checkpoints.retainOnDestroy",
        "'maybe'",
    ),
    ("no-build-without-ref", "dev", {"image": {"build": False}}, None, "image.ref", None),
    (
        "build-without-repository",
        "dev",
        {"image": {"repository": None}},
        None,
        "image.repository",
        None,
    ),
    (
        "bad-image-platform",
        "dev",
        {"image": {"platform": "windows/amd64"}},
        None,
        "image.platform",
        "'windows/amd64'",
    ),
    ("password-without-registry", "dev", {}, {"registryPassword": "pw"}, "registryPassword", None),
    ("registry-without-password", "prod", {}, None, "registryPassword", None),
    (
        "registry-missing-server",
        "prod",
        {"registry": {"server": None}},
        PROD_SECRETS,
        "registry.server",
        None,
    ),
    ("job-not-an-object", "dev", {"job": "ddp-dev"}, None, "job", None),
]


@pytest.mark.parametrize(
    ("stack", "overrides", "secrets", "key", "value"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_config_fails_before_any_resource(
    stack: str,
    overrides: dict[str, Any],
    secrets: dict[str, str] | None,
    key: str,
    value: str | None,
) -> None:
    result = run_program(stack, overrides=overrides, secrets=secrets)
    assert isinstance(result.error, pulumi.RunError), result.error
    message = str(result.error)
    assert "\n" not in message
    assert re.search(rf"config pytorch-distributed:{re.escape(key)}[ :]", message), message
    if value is not None:
        assert f"= {value}:" in message, message
    # The explanation of what is allowed follows the key/value.
    assert len(message.rsplit(": ", 1)[-1]) > 10
    # Raised from None: the CLI shows the one line, not a chain of tracebacks.
    assert result.error.__suppress_context__ or result.error.__context__ is None
    assert result.resources == []
    assert result.outputs == {}


def test_keys_under_a_misspelt_namespace_fail_before_any_resource(tmp_path: Path) -> None:
    """`pytorch_distributed:job` is read by nothing: without this the job would run with the
    defaults (100 epochs, 1 GPU per node) and no word."""
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    stack = tmp_path / "Pulumi.typo.yaml"
    stack.write_text(dev.replace("pytorch-distributed:job:", "pytorch_distributed:job:"))
    result = run_program(stack)
    assert isinstance(result.error, pulumi.RunError), result.error
    message = str(result.error)
    assert "\n" not in message
    assert "config key 'pytorch_distributed:job'" in message
    assert "this project's keys are pytorch-distributed:<key>" in message
    assert result.resources == []


def test_saving_less_often_than_the_epoch_count_is_a_valid_stack() -> None:
    """The trainer always saves the last epoch: saveEvery beyond totalEpochs saves only that."""
    result = run_program("dev", overrides={"job": {"saveEvery": 60}})
    assert result.error is None, result.error
    job = result.one("kubernetes:kubeflow.org/v1:PyTorchJob").inputs
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    trainer_args = container["args"][container["args"].index("--") + 1 :]
    assert trainer_args[2:4] == ["6", "60"]  # TOTAL_EPOCHS 6, SAVE_EVERY 60


def test_secret_password_is_never_echoed_in_errors() -> None:
    result = run_program("dev", secrets={"registryPassword": "s3cr3t-value"})
    assert isinstance(result.error, pulumi.RunError)
    assert "s3cr3t-value" not in str(result.error)
