"""Every job's pods are isolated by a NetworkPolicy of the stack.

The rendezvous (the c10d TCP store on MASTER_PORT) and each rank's collectives listen without
authentication: a pod anywhere in the cluster that reaches them can join, stall or corrupt the
run. The program declares a NetworkPolicy per job (`network.policy`, on by default) that admits
connections to the job's pods from the job's own pods only; this rule finds a job whose pods no
NetworkPolicy of the stack selects for ingress, or one that admits every source. Advisory by
default (a cluster that enforces no NetworkPolicy, or isolates its namespaces otherwise, is a
reason to turn it off); a stack's policy config makes it mandatory (prod's does).

What it cannot see: policies the cluster has besides the stack's (a namespace's default deny),
and whether the cluster enforces NetworkPolicy at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .jobs import job_view
from .model import (
    Resource,
    Violation,
    as_list,
    as_mapping,
    dig,
    is_unknown,
    metadata_name,
    metadata_namespace,
)

NETWORK_POLICY_TYPE: Final = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
EVERYWHERE: Final = ("0.0.0.0/0", "::/0")


def _selects(selector: Any, labels: Mapping[str, Any]) -> bool:
    """Whether a label selector matches these labels; an unknown part (preview) matches."""
    if is_unknown(selector) or is_unknown(labels):
        return True
    selector = as_mapping(selector)
    for key, value in as_mapping(selector.get("matchLabels")).items():
        if not (is_unknown(value) or labels.get(key) == value):
            return False
    for expression in as_list(selector.get("matchExpressions")):
        key, operator = dig(expression, "key"), dig(expression, "operator")
        values = as_list(dig(expression, "values"))
        if is_unknown(key) or is_unknown(operator):
            continue
        present = key in labels
        matched = {
            "In": present and labels[key] in values,
            "NotIn": not present or labels[key] not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(operator, False)
        if not matched:
            return False
    return True


def _admits_everyone(rule: Any) -> bool:
    """An ingress rule with no sources, or a source that is every address."""
    peers = dig(rule, "from")
    if peers is None or is_unknown(peers):
        return peers is None
    if not as_list(peers):
        return True
    return any(dig(peer, "ipBlock", "cidr") in EVERYWHERE for peer in as_list(peers))


def _isolates(policy: Resource, labels: Mapping[str, Any], namespace: Any) -> bool:
    props = policy.props
    other = metadata_namespace(props)
    if not (is_unknown(namespace) or is_unknown(other) or other == namespace):
        return False
    types = dig(props, "spec", "policyTypes")
    if not (types is None or is_unknown(types) or "Ingress" in as_list(types)):
        return False
    if not _selects(dig(props, "spec", "podSelector"), labels):
        return False
    rules = dig(props, "spec", "ingress")
    return is_unknown(rules) or not any(_admits_everyone(rule) for rule in as_list(rules))


def job_network_isolated(
    resources: Iterable[Resource], _config: Mapping[str, Any]
) -> list[Violation]:
    resources = list(resources)
    policies = [r for r in resources if r.type == NETWORK_POLICY_TYPE]
    violations: list[Violation] = []
    for job in resources:
        view = job_view(job.type)
        if view is None:
            continue
        namespace = metadata_namespace(job.props)
        for pod in view.pod_specs(job.props):
            if any(_isolates(policy, pod.labels, namespace) for policy in policies):
                continue
            violations.append(
                Violation(
                    f"{view.kind} {metadata_name(job.props)}: no NetworkPolicy of the stack "
                    f"admits only chosen sources to its {pod.replica_type} pods ({pod.path}): "
                    "any pod of the cluster can reach their rendezvous and collectives; set "
                    "network.policy: true (the default)",
                    job.urn or None,
                )
            )
    return violations
