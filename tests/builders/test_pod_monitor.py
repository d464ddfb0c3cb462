"""builders/pod_monitor.py: the job's PodMonitor exists only with `metrics.enabled` and
`metrics.podMonitor`, selects exactly the pods the job's NetworkPolicy selects (the job's own, of
whichever job API), scrapes their port `metrics` at `/metrics` every `metrics.interval`, has the
Operator's shape (tests/builders/k8s_rules.py's `validate_pod_monitor`), and is applied after
the job's pods' prerequisites, just before the job."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from builders.manifests import FIELD_MANAGER, FIELD_MANAGER_ANNOTATION, METRICS_PORT_NAME
from builders.network_policy import job_pods, network_policy_manifest
from builders.pod_monitor import pod_monitor_manifest, pod_monitor_name
from builders.stack_objects import stack_objects
from settings.stack import StackSettings
from tests.builders import pod_templates
from tests.builders.k8s_rules import validate_pod_monitor
from tests.builders.stack_settings import IMAGE, settings_for
from tests.builders.test_network_policy import OTHER_JOB, pod_template_labels, selects

JOB = "run-a"
APIS = ("pytorchjob", "trainjob")
ON = {"enabled": True, "podMonitor": True}


def stack(api: str, name: str = JOB, **sections: Any) -> StackSettings:
    job = {"name": name, "api": api, **sections.pop("job", {})}
    return settings_for(job=job, **sections)


def monitor(settings: StackSettings) -> dict[str, Any]:
    manifest = pod_monitor_manifest(settings)
    assert manifest is not None
    validate_pod_monitor(manifest)
    return manifest


@pytest.mark.parametrize("api", APIS)
def test_there_is_a_pod_monitor_only_with_metrics_and_pod_monitor_on(api: str) -> None:
    assert pod_monitor_manifest(stack(api)) is None
    assert pod_monitor_manifest(stack(api, metrics={"enabled": True})) is None
    assert pod_monitor_manifest(stack(api, metrics=ON)) is not None
    for settings in (stack(api), stack(api, metrics={"enabled": True})):
        objects = stack_objects(settings, image=IMAGE, password=None)
        assert objects.pod_monitor is None
        assert "PodMonitor" not in [m["kind"] for m in objects.in_apply_order()]


@pytest.mark.parametrize("api", APIS)
def test_it_scrapes_the_metrics_port_of_the_jobs_pods(api: str) -> None:
    settings = stack(api, metrics={**ON, "interval": "15s"}, labels={"team": "vision"})
    manifest = monitor(settings)
    assert (manifest["apiVersion"], manifest["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    metadata = manifest["metadata"]
    assert metadata["name"] == pod_monitor_name(settings) == f"{JOB}-metrics"
    assert metadata["namespace"] == settings.namespace
    assert metadata["labels"] == {
        "team": "vision",  # stack-wide labels: what a Prometheus' podMonitorSelector may ask
        "app.kubernetes.io/name": "pytorch-distributed",
        "app.kubernetes.io/instance": JOB,
        "app.kubernetes.io/managed-by": "pulumi",
        "app.kubernetes.io/component": "metrics",
    }
    assert metadata["annotations"] == {FIELD_MANAGER_ANNOTATION: FIELD_MANAGER}
    # The pods of its own namespace (no namespaceSelector), by the NetworkPolicy's selector.
    assert manifest["spec"] == {
        "selector": job_pods(settings),
        "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}],
    }
    policy = network_policy_manifest(settings)
    assert policy is not None and manifest["spec"]["selector"] == policy["spec"]["podSelector"]
    assert monitor(stack(api, metrics=ON))["spec"]["podMetricsEndpoints"][0]["interval"] == "30s"


CASES = [
    ("pytorchjob", {}),
    ("trainjob", {}),
    ("pytorchjob", {"job": {"nodes": 1}}),
    ("pytorchjob", {"job": {"nodes": 3, "elastic": {"minNodes": 1}}}),
    ("pytorchjob", {"platform": "runai", "runaiProject": "team-a"}),
]


@pytest.mark.parametrize(
    ("api", "sections"), CASES, ids=["pytorchjob", "trainjob", "one-node", "elastic", "runai"]
)
def test_it_selects_every_pod_of_the_job_and_names_a_port_they_have(
    api: str, sections: dict[str, Any]
) -> None:
    settings = stack(api, metrics=ON, **copy.deepcopy(sections))
    manifest = monitor(settings)
    selector = manifest["spec"]["selector"]
    [endpoint] = manifest["spec"]["podMetricsEndpoints"]
    for labels in pod_template_labels(settings):
        assert selects(selector, labels), labels
    for pod in pod_templates.pods(settings, IMAGE):
        assert selects(selector, pod["metadata"]["labels"]), pod["metadata"]
        container = pod_templates.training_container(pod)
        assert endpoint["port"] == METRICS_PORT_NAME
        ports = {port.get("name"): port["containerPort"] for port in container["ports"]}
        assert ports[endpoint["port"]] == settings.metrics.port, container["ports"]
    # Not another job's pods.
    for labels in pod_template_labels(stack(api, OTHER_JOB, **copy.deepcopy(sections))):
        assert not selects(selector, labels), labels


@pytest.mark.parametrize("api", APIS)
def test_it_is_applied_after_the_pods_prerequisites_and_just_before_the_job(api: str) -> None:
    registry = {"server": "registry.example.com", "username": "robot"}
    settings = stack(api, metrics=ON, registry=registry)
    objects = stack_objects(settings, image=IMAGE, password="not-a-real-password")
    assert objects.pod_monitor == pod_monitor_manifest(settings)
    kinds = [manifest["kind"] for manifest in objects.in_apply_order()]
    runtime = ["TrainingRuntime"] if api == "trainjob" else []
    assert kinds == [
        "NetworkPolicy",
        "Secret",
        "PersistentVolumeClaim",
        *runtime,
        "PodMonitor",
        objects.job["kind"],
    ]
    # The PodMonitor is the only difference podMonitor makes: the job is the same without it.
    without = stack_objects(
        stack(api, metrics={"enabled": True}, registry=registry),
        image=IMAGE,
        password="not-a-real-password",
    )
    assert without.job == objects.job and without.network_policy == objects.network_policy


def test_the_shape_check_refuses_what_the_operator_would() -> None:
    """validate_pod_monitor is a check: what the Operator's CRD refuses, it refuses."""
    good = monitor(stack("pytorchjob", metrics=ON))
    breakages = [
        ("spec", "podMetricEndpoints", [{"port": "metrics"}]),  # a misspelt field
        ("endpoint", "interval", "1.5s"),  # not a Prometheus duration
        ("endpoint", "port", 9450),  # a number is `portNumber`
        ("endpoint", "path", "metrics"),  # not a path
        ("endpoint", "scrape_interval", "30s"),  # Prometheus' word, not the Operator's
        ("selector", "matchLabels", {"app.kubernetes.io/instance": 7}),  # not a string
    ]
    for where, key, value in breakages:
        broken = copy.deepcopy(good)
        target = {
            "spec": broken["spec"],
            "endpoint": broken["spec"]["podMetricsEndpoints"][0],
            "selector": broken["spec"]["selector"],
        }[where]
        target[key] = value
        # An assertion of the Operator's shape, or the core schema's error for the selector.
        with pytest.raises((AssertionError, kubernetes_validate.ValidationError)):
            validate_pod_monitor(broken)
