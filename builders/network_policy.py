"""The job's NetworkPolicy (`network.policy`, `network.egress`): who may connect to the job's pods,
and whom they may connect to.

Why: the rendezvous (the c10d TCP store on `MASTER_PORT`) and every rank's collectives listen
without authentication, on ports the job does not know in advance (gloo and NCCL pick theirs), so
the policy admits connections to the job's pods from the job's own pods on every port and from
nothing else. The pods are chosen by the labels every job API puts on its pod templates (the
stack's name and instance labels, and a replica type of the job's API as the component), so a pod
of another job, of another namespace or `make checkpoint`'s reader (component
`checkpoint-reader`) matches neither side. Exec, logs and port-forwarding go through the kubelet,
not the pod network, and are not affected.

With `metrics.enabled` one more rule admits connections to the pods' port `metrics` (TCP, the
port rank 0 serves Prometheus' /metrics on) from the pods of the namespaces `metrics.scrapeFrom`
names (where Prometheus runs), and to that port only.

Egress stays open unless `network.egress` lists destinations: then the pods reach their own job's
pods, name resolution (port 53, TCP and UDP, at any address: the workers look up the master's
Service name, and where the cluster's DNS runs is the cluster's business) and those destinations.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from builders.job_apis import api_of_settings
from builders.manifests import (
    METRICS_PORT_NAME,
    common_labels,
    object_metadata,
    resource_names,
)
from settings.stack import EgressSettings, StackSettings

COMPONENT_LABEL = "app.kubernetes.io/component"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
DNS_PORT = 53
PROTOCOLS = ("TCP", "UDP")


def network_policy_name(settings: StackSettings) -> str:
    return f"{resource_names(settings).job}-network"


def job_pods(settings: StackSettings) -> dict[str, Any]:
    """The label selector of the job's own pods, whichever job API runs them."""
    replica_types = sorted({kind.lower() for kind in api_of_settings(settings).replica_order})
    labels = common_labels(settings)
    return {
        "matchLabels": {
            key: labels[key] for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance")
        },
        "matchExpressions": [{"key": COMPONENT_LABEL, "operator": "In", "values": replica_types}],
    }


def _ports(numbers: Iterable[int]) -> list[dict[str, Any]]:
    return [{"port": number, "protocol": protocol} for number in numbers for protocol in PROTOCOLS]


def _egress_rule(destination: EgressSettings) -> dict[str, Any]:
    peer: dict[str, Any]
    if destination.cidr is not None:
        peer = {"ipBlock": {"cidr": destination.cidr}}
    else:
        peer = {"podSelector": {"matchLabels": dict(destination.pod_labels)}}
        if destination.namespace is not None:
            peer["namespaceSelector"] = {
                "matchLabels": {NAMESPACE_NAME_LABEL: destination.namespace}
            }
    rule: dict[str, Any] = {"to": [peer]}
    if destination.ports:
        rule["ports"] = _ports(destination.ports)
    return rule


def metrics_ingress(settings: StackSettings) -> dict[str, Any]:
    """The rule that lets Prometheus scrape: the port `metrics`, TCP, from every pod of the
    namespaces `metrics.scrapeFrom` names (by the name label the API server sets on each)."""
    namespaces = {
        "matchExpressions": [
            {
                "key": NAMESPACE_NAME_LABEL,
                "operator": "In",
                "values": list(settings.metrics.scrape_from),
            }
        ]
    }
    return {
        "from": [{"namespaceSelector": namespaces}],
        "ports": [{"port": METRICS_PORT_NAME, "protocol": "TCP"}],
    }


def network_policy_manifest(settings: StackSettings) -> dict[str, Any] | None:
    """The job's NetworkPolicy; None when `network.policy` is off."""
    network = settings.network
    if not network.policy:
        return None
    spec: dict[str, Any] = {
        "podSelector": job_pods(settings),
        "policyTypes": ["Ingress"],
        # No ports: the collectives' ports are chosen at run time.
        "ingress": [{"from": [{"podSelector": job_pods(settings)}]}],
    }
    if settings.metrics.enabled:
        spec["ingress"].append(metrics_ingress(settings))
    if network.egress is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = [
            {"to": [{"podSelector": job_pods(settings)}]},
            {"ports": _ports([DNS_PORT])},
            *(_egress_rule(destination) for destination in network.egress),
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_metadata(settings, network_policy_name(settings), "network"),
        "spec": spec,
    }
