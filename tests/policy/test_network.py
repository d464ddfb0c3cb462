"""job-network-isolated: every job's pods are behind a NetworkPolicy of the stack that admits
only chosen sources."""

from __future__ import annotations

from typing import Any

import pytest

from builders.stack_objects import stack_objects
from policy.rules.model import PYTORCHJOB_TYPE, TRAINJOB_TYPE, Resource
from policy.rules.network import NETWORK_POLICY_TYPE, job_network_isolated
from tests.builders.stack_settings import IMAGE, settings_for
from tests.policy import samples

JOB_LABELS = {"app.kubernetes.io/instance": "ddp", "app.kubernetes.io/component": "master"}


def labelled(job: dict[str, Any]) -> dict[str, Any]:
    """The sample job with the labels the program puts on its pods' templates."""
    for replica_type, spec in job["spec"]["pytorchReplicaSpecs"].items():
        labels = {**JOB_LABELS, "app.kubernetes.io/component": replica_type.lower()}
        spec["template"]["metadata"] = {"labels": labels}
    return job


def network_policy(**spec: Any) -> dict[str, Any]:
    selector = {
        "matchLabels": {"app.kubernetes.io/instance": "ddp"},
        "matchExpressions": [
            {"key": "app.kubernetes.io/component", "operator": "In", "values": ["master", "worker"]}
        ],
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "ddp-network", "namespace": samples.NAMESPACE},
        "spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": selector}]}],
            **spec,
        },
    }


def check(job: dict[str, Any], *policies: dict[str, Any], job_type: str = PYTORCHJOB_TYPE):
    resources = [Resource(job_type, "job", job, "urn:job")]
    resources += [
        Resource(NETWORK_POLICY_TYPE, "np", p, f"urn:np{i}") for i, p in enumerate(policies)
    ]
    return job_network_isolated(resources, {})


def test_a_job_behind_its_policy_passes() -> None:
    assert check(labelled(samples.pytorchjob()), network_policy()) == []


def test_a_job_without_a_policy_is_named_once_per_pod_template() -> None:
    found = check(labelled(samples.pytorchjob()))
    assert [v.urn for v in found] == ["urn:job", "urn:job"]
    assert "PyTorchJob ddp: no NetworkPolicy of the stack" in found[0].message
    assert "spec.pytorchReplicaSpecs.Master.template.spec" in found[0].message
    assert "Worker" in found[1].message


def test_a_policy_that_selects_other_pods_does_not_count() -> None:
    other = network_policy()
    other["spec"]["podSelector"] = {"matchLabels": {"app.kubernetes.io/instance": "other"}}
    assert len(check(labelled(samples.pytorchjob()), other)) == 2
    missing_worker = network_policy()
    missing_worker["spec"]["podSelector"]["matchExpressions"][0]["values"] = ["master"]
    [worker] = check(labelled(samples.pytorchjob()), missing_worker)
    assert "Worker" in worker.message


def test_a_policy_of_another_namespace_does_not_count() -> None:
    policy = network_policy()
    policy["metadata"]["namespace"] = "elsewhere"
    assert len(check(labelled(samples.pytorchjob()), policy)) == 2


def test_a_policy_that_admits_everyone_does_not_count() -> None:
    for ingress in ([{}], [{"from": []}], [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]):
        assert len(check(labelled(samples.pytorchjob()), network_policy(ingress=ingress))) == 2
    egress_only = network_policy(policyTypes=["Egress"])
    assert len(check(labelled(samples.pytorchjob()), egress_only)) == 2


def test_a_default_deny_selecting_every_pod_counts() -> None:
    deny = network_policy(podSelector={}, ingress=[])
    assert check(labelled(samples.pytorchjob()), deny) == []


def test_selector_operators() -> None:
    job = labelled(samples.pytorchjob())
    for expression, isolated in (
        ({"key": "app.kubernetes.io/component", "operator": "Exists"}, True),
        ({"key": "app.kubernetes.io/component", "operator": "DoesNotExist"}, False),
        ({"key": "team", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "app.kubernetes.io/component", "operator": "NotIn", "values": ["master"]}, False),
    ):
        policy = network_policy()
        policy["spec"]["podSelector"]["matchExpressions"] = [expression]
        assert (check(job, policy) == []) is isolated, expression


def test_a_trainjob_is_judged_by_its_runtime_patch_labels() -> None:
    job = samples.trainjob()
    replicated = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    template = replicated["replicatedJobs"][0]["template"]["spec"]["template"]
    [unlabelled] = check(job, network_policy(), job_type=TRAINJOB_TYPE)
    assert "TrainJob ddp" in unlabelled.message and "node pods" in unlabelled.message
    template["metadata"] = {"labels": {**JOB_LABELS, "app.kubernetes.io/component": "node"}}
    policy = network_policy()
    policy["spec"]["podSelector"]["matchExpressions"][0]["values"] = ["node"]
    assert check(job, policy, job_type=TRAINJOB_TYPE) == []


def test_a_rule_from_named_namespaces_on_one_port_does_not_count_as_open() -> None:
    """`metrics.enabled`'s rule (the port `metrics` from the namespaces `metrics.scrapeFrom`
    names) admits chosen sources: the job stays isolated beside it. An open rule beside it still
    counts."""
    scrapes = {
        "from": [
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": ["monitoring"],
                        }
                    ]
                }
            }
        ],
        "ports": [{"port": "metrics", "protocol": "TCP"}],
    }
    own = network_policy()["spec"]["ingress"][0]
    assert check(labelled(samples.pytorchjob()), network_policy(ingress=[own, scrapes])) == []
    opened = network_policy(ingress=[own, scrapes, {"ports": [{"port": "metrics"}]}])
    assert len(check(labelled(samples.pytorchjob()), opened)) == 2


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_the_builders_policy_with_metrics_isolates_the_builders_job(api: str) -> None:
    """The manifests themselves: the job and the NetworkPolicy the builders make with metrics
    on, as the rule reads them."""
    settings = settings_for(job={"api": api}, metrics={"enabled": True, "podMonitor": True})
    objects = stack_objects(settings, image=IMAGE, password=None)
    assert (
        objects.network_policy is not None and len(objects.network_policy["spec"]["ingress"]) == 2
    )
    job_type = PYTORCHJOB_TYPE if api == "pytorchjob" else TRAINJOB_TYPE
    assert check(objects.job, objects.network_policy, job_type=job_type) == []
