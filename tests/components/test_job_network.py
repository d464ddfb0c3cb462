"""components/job_network.py under mocks, through the committed stacks' programs: the job's
NetworkPolicy is one resource under a JobNetwork component of the TrainingEnvironment, declared
as builders/network_policy.py builds it, made before the job (which depends on it), and absent
with `network.policy: false`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from builders.network_policy import network_policy_manifest
from settings.stack import StackSettings, load_stack_file, parse_settings
from tests.builders.k8s_rules import validate_manifest
from tests.components.conftest import JOB, NETWORK_POLICY, PROD_SECRETS
from tests.pulumi_harness import REPO_ROOT, ProgramResult, run_program

COMPONENT = "pytorch-distributed:index:"
JOB_NETWORK = COMPONENT + "JobNetwork"
ENVIRONMENT = COMPONENT + "TrainingEnvironment"
K8S_PROVIDER = "pulumi:providers:kubernetes"
TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
JOB_OF_STACK = {"dev": JOB, "prod": JOB, "trainjob": TRAINJOB}
EGRESS = [
    {"cidr": "192.0.2.10/32", "ports": [443]},
    {"namespace": "storage", "podLabels": {"app": "minio"}, "ports": [9000]},
]


def program(stack: str, **overrides: Any) -> ProgramResult:
    secrets = PROD_SECRETS if stack == "prod" else None
    result = run_program(stack, overrides=overrides, secrets=secrets)
    assert result.error is None, result.error
    return result


def expected_settings(stack: str, network: dict[str, Any] | None = None) -> StackSettings:
    """The stack's settings as the program reads them, with `network` as overridden."""
    settings = load_stack_file(stack, REPO_ROOT)
    if network is None:
        return settings
    values = {"image": {"repository": "registry.example.com/t"}, "network": network}
    return dataclasses.replace(settings, network=parse_settings(values).network)


@pytest.fixture(scope="module")
def trainjob() -> ProgramResult:
    return program("trainjob")


@pytest.fixture(scope="module")
def with_egress() -> ProgramResult:
    return program("dev", network={"egress": EGRESS})


def results(stack: str, request: pytest.FixtureRequest) -> ProgramResult:
    return request.getfixturevalue({"egress": "with_egress"}.get(stack, stack))


@pytest.mark.parametrize(
    ("stack", "network"),
    [("dev", None), ("prod", None), ("trainjob", None), ("egress", {"egress": EGRESS})],
)
def test_one_network_policy_under_a_job_network_of_the_environment(
    stack: str, network: dict[str, Any] | None, request: pytest.FixtureRequest
) -> None:
    result = results(stack, request)
    stack_file = "dev" if stack == "egress" else stack
    component = result.one(JOB_NETWORK)
    policy = result.one(NETWORK_POLICY)
    environment = result.one(ENVIRONMENT)
    # TrainingEnvironment -> JobNetwork -> NetworkPolicy
    assert policy.parent == component.urn
    assert component.parent == environment.urn
    assert (component.name, policy.name) == ("training-network", "training-network-policy")
    assert not component.custom and policy.custom
    assert policy.provider.startswith(result.one(K8S_PROVIDER).urn + "::")
    manifest = network_policy_manifest(expected_settings(stack_file, network))
    assert manifest is not None
    inputs = policy.plain_inputs()
    assert inputs["spec"] == manifest["spec"]
    assert inputs["metadata"] == manifest["metadata"]
    assert (inputs["apiVersion"], inputs["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    validate_manifest(inputs)
    if network is not None:
        assert inputs["spec"]["policyTypes"] == ["Ingress", "Egress"]


@pytest.mark.parametrize("stack", ["dev", "prod", "trainjob"])
def test_the_job_waits_for_its_network_policy(stack: str, request: pytest.FixtureRequest) -> None:
    """The job depends on the JobNetwork component, which the engine sees as a dependency on
    the NetworkPolicy in it: the pods start isolated."""
    result = results(stack, request)
    assert result.one(NETWORK_POLICY).urn in result.one(JOB_OF_STACK[stack]).dependencies


@pytest.mark.parametrize("stack", ["dev", "trainjob"])
def test_with_network_policy_off_there_is_no_job_network_and_the_rest_is_the_same(
    stack: str, request: pytest.FixtureRequest
) -> None:
    result = program(stack, network={"policy": False})
    assert not result.of_type(JOB_NETWORK)
    assert not result.of_type(NETWORK_POLICY)
    on = results(stack, request)
    left = sorted(
        (resource.type, resource.name)
        for resource in on.resources
        if resource.type not in (JOB_NETWORK, NETWORK_POLICY)
    )
    assert sorted((resource.type, resource.name) for resource in result.resources) == left
    job = JOB_OF_STACK[stack]
    assert result.one(job).plain_inputs() == on.one(job).plain_inputs()
