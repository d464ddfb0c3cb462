"""components/job_metrics.py under mocks, through the committed stacks' programs: with
`metrics.podMonitor` the job's PodMonitor is one custom resource under a JobMetrics component of
the TrainingEnvironment, declared as builders/pod_monitor.py builds it, through the stack's own
Kubernetes provider, made before the job (which depends on it); without it (the default, and with
`metrics.enabled` alone) there is neither, and nothing else of the stack changes but what
`metrics.enabled` asks of the job and its NetworkPolicy."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from builders.pod_monitor import pod_monitor_manifest
from settings.stack import StackSettings, load_stack_file, parse_settings
from tests.builders.k8s_rules import validate_pod_monitor
from tests.components.conftest import JOB, NETWORK_POLICY, PROD_SECRETS
from tests.pulumi_harness import REPO_ROOT, ProgramResult, run_program

COMPONENT = "pytorch-distributed:index:"
JOB_METRICS = COMPONENT + "JobMetrics"
ENVIRONMENT = COMPONENT + "TrainingEnvironment"
K8S_PROVIDER = "pulumi:providers:kubernetes"
POD_MONITOR = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
JOB_OF_STACK = {"dev": JOB, "prod": JOB, "trainjob": TRAINJOB}
STACKS = ("dev", "prod", "trainjob")
ON = {"enabled": True, "podMonitor": True, "scrapeFrom": ["prometheus"], "interval": "15s"}


def program(stack: str, **overrides: Any) -> ProgramResult:
    secrets = PROD_SECRETS if stack == "prod" else None
    result = run_program(stack, overrides=overrides, secrets=secrets)
    assert result.error is None, result.error
    return result


def expected_settings(stack: str) -> StackSettings:
    """The stack's settings as the program reads them, with ON as the metrics."""
    settings = load_stack_file(stack, REPO_ROOT)
    values = {"image": {"repository": "registry.example.com/t"}, "metrics": ON}
    return dataclasses.replace(settings, metrics=parse_settings(values).metrics)


@pytest.fixture(scope="module")
def monitored() -> dict[str, ProgramResult]:
    return {stack: program(stack, metrics=ON) for stack in STACKS}


@pytest.fixture(scope="module")
def plain() -> dict[str, ProgramResult]:
    return {stack: program(stack) for stack in STACKS}


@pytest.mark.parametrize("stack", STACKS)
def test_one_pod_monitor_under_a_job_metrics_of_the_environment(
    stack: str, monitored: dict[str, ProgramResult]
) -> None:
    result = monitored[stack]
    component = result.one(JOB_METRICS)
    monitor = result.one(POD_MONITOR)
    environment = result.one(ENVIRONMENT)
    # TrainingEnvironment -> JobMetrics -> PodMonitor
    assert monitor.parent == component.urn
    assert component.parent == environment.urn
    assert (component.name, monitor.name) == ("training-metrics", "training-metrics-podmonitor")
    assert not component.custom and monitor.custom
    assert monitor.provider.startswith(result.one(K8S_PROVIDER).urn + "::")
    manifest = pod_monitor_manifest(expected_settings(stack))
    assert manifest is not None
    inputs = monitor.plain_inputs()
    assert inputs == manifest
    assert inputs["spec"]["podMetricsEndpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s"}
    ]
    validate_pod_monitor(inputs)


@pytest.mark.parametrize("stack", STACKS)
def test_it_selects_the_pods_the_network_policy_selects_and_the_job_waits_for_it(
    stack: str, monitored: dict[str, ProgramResult]
) -> None:
    """The job depends on the JobMetrics component, which the engine sees as a dependency on the
    PodMonitor in it: scraped from their start, and a cluster without the CRD stops the update
    before the job exists."""
    result = monitored[stack]
    monitor = result.one(POD_MONITOR).plain_inputs()
    policy = result.one(NETWORK_POLICY).plain_inputs()
    assert monitor["spec"]["selector"] == policy["spec"]["podSelector"]
    # The policy admits the scrapes: the port the PodMonitor names, from scrapeFrom's namespaces.
    [_, scrapes] = policy["spec"]["ingress"]
    assert scrapes["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    [peer] = scrapes["from"]
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == ["prometheus"]
    job = result.one(JOB_OF_STACK[stack])
    assert result.one(POD_MONITOR).urn in job.dependencies
    assert result.one(NETWORK_POLICY).urn in job.dependencies


@pytest.mark.parametrize("stack", STACKS)
def test_without_pod_monitor_there_is_no_job_metrics_and_the_rest_is_the_same(
    stack: str, monitored: dict[str, ProgramResult], plain: dict[str, ProgramResult]
) -> None:
    """metrics.enabled alone changes the job's and the policy's inputs, never which resources
    the stack has; metrics off (the default) is the stack as it always was."""
    enabled = program(stack, metrics={**ON, "podMonitor": False})
    for result in (plain[stack], enabled):
        assert not result.of_type(JOB_METRICS)
        assert not result.of_type(POD_MONITOR)

    def names(result: ProgramResult) -> list[tuple[str, str]]:
        return sorted(
            (resource.type, resource.name)
            for resource in result.resources
            if resource.type not in (JOB_METRICS, POD_MONITOR)
        )

    assert names(enabled) == names(plain[stack]) == names(monitored[stack])
    job = JOB_OF_STACK[stack]
    # The PodMonitor is the only thing podMonitor adds: the job is the same without it.
    assert enabled.one(job).plain_inputs() == monitored[stack].one(job).plain_inputs()
    assert enabled.one(job).plain_inputs() != plain[stack].one(job).plain_inputs()


def test_the_component_names_its_pod_monitor(tmp_path: Path) -> None:
    """JobMetrics on its own, in another program: its typed output is the PodMonitor's name,
    read back from the custom resource's metadata."""
    program_file = tmp_path / "__main__.py"
    program_file.write_text(
        "import pulumi\n"
        "from components.job_metrics import JobMetrics\n"
        "manifest = {'apiVersion': 'monitoring.coreos.com/v1', 'kind': 'PodMonitor',\n"
        "    'metadata': {'name': 'run-a-metrics', 'namespace': 'team'},\n"
        "    'spec': {'selector': {'matchLabels': {'app': 'x'}},\n"
        "        'podMetricsEndpoints': [{'port': 'metrics'}]}}\n"
        "metrics = JobMetrics('m', manifest)\n"
        "pulumi.export('podMonitorName', metrics.pod_monitor_name)\n",
        encoding="utf-8",
    )
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text("config: {}\n", encoding="utf-8")
    result = run_program(stack, program=program_file, project="another-program")
    assert result.error is None, result.error
    assert result.outputs["podMonitorName"].value == "run-a-metrics"
    component, monitor = result.one(JOB_METRICS), result.one(POD_MONITOR)
    assert monitor.parent == component.urn and monitor.name == "m-podmonitor"
