"""The committed stacks' programs under mocks, run once per test module that asks for them, and
what the component tests read of them: test_program.py and the tests of each component
(test_pytorch_job.py, test_checkpoint_volume.py, test_stack_secret.py, test_job_network.py) share
these."""

from __future__ import annotations

from typing import Any

import pytest

from builders.manifests import FIELD_MANAGER, FIELD_MANAGER_ANNOTATION
from tests.pulumi_harness import ProgramResult, run_program

PASSWORD = "hunter2-not-real"
PROD_SECRETS = {"registryPassword": PASSWORD}

JOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
SECRET = "kubernetes:core/v1:Secret"
IMAGE = "docker:index/image:Image"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"

# What every object's annotations hold besides the ones a test is about.
FIELD_MANAGER_ONLY = {FIELD_MANAGER_ANNOTATION: FIELD_MANAGER}


@pytest.fixture(scope="module")
def dev() -> ProgramResult:
    result = run_program("dev")
    assert result.error is None, result.error
    return result


@pytest.fixture(scope="module")
def prod() -> ProgramResult:
    result = run_program("prod", secrets=PROD_SECRETS)
    assert result.error is None, result.error
    return result


def replica_specs(result: ProgramResult) -> dict[str, Any]:
    return result.one(JOB).inputs["spec"]["pytorchReplicaSpecs"]


def pod_specs(result: ProgramResult) -> dict[str, dict[str, Any]]:
    return {kind: spec["template"]["spec"] for kind, spec in replica_specs(result).items()}
