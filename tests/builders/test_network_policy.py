"""builders/network_policy.py: the job's NetworkPolicy selects exactly the pods the job's manifest
makes (whichever job API runs them), admits connections to them from those pods only, and, with
`network.egress`, lets them reach only their own pods, name resolution and the destinations
listed.

The selector is held to the labels the rendered job manifest really puts on its pod templates,
through a label-selector matcher written here from Kubernetes' rules (matchLabels, and
matchExpressions with `In`, the one operator the policy uses), not to `job_pods` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from builders.manifests import (
    FIELD_MANAGER,
    FIELD_MANAGER_ANNOTATION,
    READER_MANAGER,
    checkpoint_reader_pod_manifest,
)
from builders.network_policy import job_pods, network_policy_manifest, network_policy_name
from builders.stack_objects import stack_objects
from settings.stack import StackSettings
from tests.builders import pod_templates
from tests.builders.k8s_rules import validate_manifest
from tests.builders.stack_settings import IMAGE, settings_for

JOB = "run-a"
OTHER_JOB = "run-b"
APIS = ("pytorchjob", "trainjob")


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector matches a pod's labels: every matchLabels pair present with its
    value, and every `In` expression's key present with one of its values (Kubernetes' rules,
    apimachinery's labels.Selector)."""
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        assert expression["operator"] == "In", expression  # the only one the policy uses
        if expression["key"] not in labels or labels[expression["key"]] not in expression["values"]:
            return False
    return True


def stack(api: str, name: str = JOB, **sections: Any) -> StackSettings:
    job = {"name": name, "api": api, **sections.pop("job", {})}
    return settings_for(job=job, **sections)


def pod_template_labels(settings: StackSettings) -> list[dict[str, str]]:
    """The labels of every pod template the rendered job manifest carries: a PyTorchJob's
    replica specs', a TrainJob's runtime patches' (the TrainingRuntime's own pod template has
    none of the stack's)."""
    job = stack_objects(settings, image=IMAGE, password=None).job
    if job["kind"] == "PyTorchJob":
        templates = [spec["template"] for spec in job["spec"]["pytorchReplicaSpecs"].values()]
    else:
        assert job["kind"] == "TrainJob"
        templates = [
            replicated["template"]["spec"]["template"]
            for patch in job["spec"]["runtimePatches"]
            for replicated in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        ]
    labels = [dict(template["metadata"]["labels"]) for template in templates]
    assert labels, job["kind"]
    return labels


def reader_labels(settings: StackSettings) -> dict[str, str]:
    """The labels of the pod `make checkpoint` starts to read the job's checkpoints."""
    pod = checkpoint_reader_pod_manifest(
        settings,
        name=f"{settings.job.name}-checkpoint-reader-abc",
        image=IMAGE,
        pull_secret=None,
        node=None,
        deadline_seconds=600,
    )
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == READER_MANAGER
    return dict(pod["metadata"]["labels"])


def policy(settings: StackSettings) -> dict[str, Any]:
    manifest = network_policy_manifest(settings)
    assert manifest is not None
    validate_manifest(manifest)
    return manifest


def both_protocols(*ports: int) -> list[dict[str, Any]]:
    return [{"port": port, "protocol": protocol} for port in ports for protocol in ("TCP", "UDP")]


VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "extra-labels": {"labels": {"team": "vision"}},  # metadata only, never on the pods
    "one-node": {"job": {"nodes": 1}},  # a PyTorchJob with a Master and no Worker
}
# What only a PyTorchJob runs: an elastic job (Workers, no Master), and on Run:ai (whose
# scheduler's labels the pods carry).
PYTORCHJOB_ONLY: dict[str, dict[str, Any]] = {
    "elastic": {"job": {"nodes": 3, "elastic": {"minNodes": 1}}},
    "runai": {"platform": "runai", "runaiProject": "team-a"},
}
CASES = [
    *((api, variant, sections) for variant, sections in VARIANTS.items() for api in APIS),
    *(("pytorchjob", variant, sections) for variant, sections in PYTORCHJOB_ONLY.items()),
]


@pytest.mark.parametrize(
    ("api", "sections"),
    [case[::2] for case in CASES],
    ids=[f"{api}-{variant}" for api, variant, _ in CASES],
)
def test_the_policy_selects_exactly_the_pods_the_job_manifest_makes(
    api: str, sections: dict[str, Any]
) -> None:
    settings = stack(api, **sections)
    spec = policy(settings)["spec"]
    selector = spec["podSelector"]
    assert selector == job_pods(settings)
    for labels in pod_template_labels(settings):
        assert selects(selector, labels), labels
    # The pods as the job API's controller makes them from the stack's objects, too.
    for pod in pod_templates.pods(settings, IMAGE):
        assert selects(selector, pod["metadata"]["labels"]), pod["metadata"]
    # Not `make checkpoint`'s reader (same name and instance labels, its own component) ...
    assert not selects(selector, reader_labels(settings))
    # ... nor another job's pods, of this job API or (where it runs) the other ...
    others = [stack(api, OTHER_JOB, **sections)]
    if settings.platform != "runai":
        others += [stack(other, OTHER_JOB) for other in APIS if other != api]
    for other in others:
        for labels in pod_template_labels(other):
            assert not selects(selector, labels), labels
    # ... nor a pod with no labels: the selector is never the empty one, which selects all.
    assert not selects(selector, {})


@pytest.mark.parametrize("api", APIS)
def test_the_pods_of_the_other_job_api_under_the_same_name_are_not_the_jobs(api: str) -> None:
    """The component label is the job API's replica type: a PyTorchJob's policy leaves a
    TrainJob of the same name alone, and the other way round."""
    selector = policy(stack(api))["spec"]["podSelector"]
    [other_api] = [name for name in APIS if name != api]
    for labels in pod_template_labels(stack(other_api)):
        assert not selects(selector, labels), labels


@pytest.mark.parametrize("api", APIS)
def test_ingress_comes_only_from_the_jobs_own_pods_on_every_port(api: str) -> None:
    settings = stack(api)
    manifest = policy(settings)
    assert manifest["apiVersion"] == "networking.k8s.io/v1"
    assert manifest["kind"] == "NetworkPolicy"
    metadata = manifest["metadata"]
    assert metadata["name"] == network_policy_name(settings) == f"{JOB}-network"
    assert metadata["namespace"] == settings.namespace
    assert metadata["labels"]["app.kubernetes.io/instance"] == JOB
    assert metadata["labels"]["app.kubernetes.io/component"] == "network"
    assert metadata["annotations"] == {FIELD_MANAGER_ANNOTATION: FIELD_MANAGER}
    spec = manifest["spec"]
    # One source, the job's own pods (of the policy's namespace: no namespaceSelector, no
    # ipBlock), and no ports: the collectives pick theirs at run time.
    assert spec["ingress"] == [{"from": [{"podSelector": spec["podSelector"]}]}]
    # Egress is left open: no Egress policy type, no egress rules.
    assert spec["policyTypes"] == ["Ingress"]
    assert "egress" not in spec


@pytest.mark.parametrize("api", APIS)
def test_with_egress_the_pods_reach_their_own_pods_dns_and_each_destination_only(
    api: str,
) -> None:
    egress = [
        {"cidr": "192.0.2.10/32", "ports": [443, "9000"]},
        {"namespace": "storage", "podLabels": {"app": "minio"}, "ports": [9000]},
        {"podLabels": {"app.kubernetes.io/name": "mirror"}},
        {"namespace": "monitoring"},
        {"cidr": "2001:db8::/32"},
    ]
    settings = stack(api, network={"egress": egress})
    spec = policy(settings)["spec"]
    own = job_pods(settings)
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"from": [{"podSelector": own}]}]  # unchanged by egress
    namespace = "kubernetes.io/metadata.name"
    assert spec["egress"] == [
        {"to": [{"podSelector": own}]},  # every port of their own pods
        {"ports": both_protocols(53)},  # name resolution, at any address: no `to`
        {"to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}], "ports": both_protocols(443, 9000)},
        {
            "to": [
                {
                    "podSelector": {"matchLabels": {"app": "minio"}},
                    "namespaceSelector": {"matchLabels": {namespace: "storage"}},
                }
            ],
            "ports": both_protocols(9000),
        },
        # Without a namespace: pods of the job's own namespace, every port.
        {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "mirror"}}}]},
        # A namespace alone: all of its pods.
        {
            "to": [
                {
                    "podSelector": {"matchLabels": {}},
                    "namespaceSelector": {"matchLabels": {namespace: "monitoring"}},
                }
            ]
        },
        {"to": [{"ipBlock": {"cidr": "2001:db8::/32"}}]},
    ]


def test_an_empty_egress_list_leaves_the_pods_their_own_pods_and_dns() -> None:
    settings = stack("pytorchjob", network={"egress": []})
    spec = policy(settings)["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == [
        {"to": [{"podSelector": job_pods(settings)}]},
        {"ports": both_protocols(53)},
    ]


@pytest.mark.parametrize("api", APIS)
def test_the_policy_is_applied_first_and_only_while_network_policy_is_on(api: str) -> None:
    on = stack_objects(stack(api), image=IMAGE, password=None)
    assert on.network_policy == network_policy_manifest(stack(api))
    assert on.in_apply_order()[0] is on.network_policy
    off = stack(api, network={"policy": False})
    assert network_policy_manifest(off) is None
    objects = stack_objects(off, image=IMAGE, password=None)
    assert objects.network_policy is None
    kinds = [manifest["kind"] for manifest in objects.in_apply_order()]
    assert "NetworkPolicy" not in kinds and kinds[-1] == objects.job["kind"]
    # Only the policy goes: the job is the same with or without it.
    assert objects.job == on.job


@pytest.mark.parametrize("api", APIS)
def test_with_metrics_prometheus_namespaces_reach_the_metrics_port_and_nothing_else(
    api: str,
) -> None:
    """One more ingress rule: the pods' port `metrics`, TCP, from every pod of the namespaces
    `metrics.scrapeFrom` names; the job's own rule unchanged."""
    settings = stack(api, metrics={"enabled": True, "scrapeFrom": ["monitoring", "obs"]})
    spec = policy(settings)["spec"]
    own = job_pods(settings)
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["ingress"] == [
        {"from": [{"podSelector": own}]},
        {
            "from": [
                {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "In",
                                "values": ["monitoring", "obs"],
                            }
                        ]
                    }
                }
            ],
            "ports": [{"port": "metrics", "protocol": "TCP"}],
        },
    ]
    # The port it names is the one every training container declares, at `metrics.port`.
    for pod in pod_templates.pods(settings, IMAGE):
        [container] = pod["spec"]["containers"]
        named = {port.get("name"): port["containerPort"] for port in container["ports"]}
        assert named["metrics"] == settings.metrics.port
    # With egress restricted too, the egress rules are what they were.
    both = stack(api, metrics={"enabled": True}, network={"egress": []})
    assert (
        policy(both)["spec"]["egress"]
        == policy(stack(api, network={"egress": []}))["spec"]["egress"]
    )


@pytest.mark.parametrize("api", APIS)
def test_without_metrics_or_without_the_policy_there_is_no_metrics_rule(api: str) -> None:
    for metrics in ({}, {"scrapeFrom": ["obs"], "port": 9500}):  # off: its keys say nothing
        spec = policy(stack(api, metrics=metrics))["spec"]
        assert spec["ingress"] == [{"from": [{"podSelector": spec["podSelector"]}]}]
    # network.policy: false is no policy at all, metrics or not.
    assert (
        network_policy_manifest(stack(api, metrics={"enabled": True}, network={"policy": False}))
        is None
    )
