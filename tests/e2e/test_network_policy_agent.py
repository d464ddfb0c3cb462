"""The real node enforces NetworkPolicy: its agent (kube-network-policies,
cluster/network_policy_agent.py) drops a connection a policy does not allow, between two pods of
the node's bridge, and lets it through again once the policy is gone.

Three pods of the busybox init image the node holds (no pull): a listener A and a client C in
the node's namespace with the same label, and a client B with that label in a namespace of its
own placed on the node (the node namespace's annotations). Without a policy both reach A; with a
policy in the node's namespace selecting A that admits only its own namespace's pods with that
label, B's connection attempt times out (its SYN dropped) and C's goes through; the policy
deleted, B reaches A again. The stack's own policy, on a training job: tests/e2e/test_real_node.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.real_node import NAMESPACE, POD_SECURITY_ENFORCE, RealNode
from tests.e2e.conftest import Cluster, started_real_node
from tests.support.waiting import wait_until

OTHER_NAMESPACE = "policy-probe"
LABELS = {"app": "policy-listener"}
PORT = 29500
GREETING = "reached"
# nc's connect timeout: a dropped SYN shows as "timed out" after this.
CONNECT_TIMEOUT_S = 2
START_TIMEOUT_S = 120
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.fixture(scope="module")
def node(cluster: Cluster, real_node_registry: Path) -> Iterator[RealNode]:
    yield from started_real_node(cluster, real_node_registry)


@pytest.fixture(scope="module")
def core(cluster: Cluster) -> Any:
    from kubernetes import client

    return client.CoreV1Api(cluster.api())


def pod(name: str, image: str, command: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/busybox", *command],
                    "securityContext": RESTRICTED,
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def pods(core: Any, node: RealNode) -> Iterator[dict[str, tuple[str, str]]]:
    """A, B and C as name -> (namespace, pod IP), once all three run."""
    image = (node.plane.bin_dir.parent / "init-image" / "ref").read_text().strip()
    own = core.read_namespace(NAMESPACE).metadata
    core.create_namespace(
        {
            "metadata": {
                "name": OTHER_NAMESPACE,
                "labels": {POD_SECURITY_ENFORCE: "restricted"},
                "annotations": own.annotations,
            }
        }
    )
    placed = {"a": NAMESPACE, "b": OTHER_NAMESPACE, "c": NAMESPACE}
    try:
        # A pod is refused until its namespace's default service account exists.
        wait_until(
            lambda: bool(core.list_namespaced_service_account(OTHER_NAMESPACE).items),
            "the namespace's default service account",
            START_TIMEOUT_S,
        )
        listen = ["nc", "-ll", "-p", str(PORT), "-e", "/bin/echo", GREETING]
        for name, namespace in placed.items():
            command = listen if name == "a" else ["sleep", "3600"]
            core.create_namespaced_pod(namespace, pod(name, image, command))
        addresses: dict[str, tuple[str, str]] = {}

        def running() -> bool:
            for name, namespace in placed.items():
                status = core.read_namespaced_pod(name, namespace).status
                if status.phase == "Running" and status.pod_ip:
                    addresses[name] = (namespace, status.pod_ip)
            return len(addresses) == len(placed)

        wait_until(running, "the three pods to run", START_TIMEOUT_S)
        yield addresses
    finally:
        for name, namespace in placed.items():
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        core.delete_namespace(OTHER_NAMESPACE, grace_period_seconds=0)


def reach(core: Any, pods: dict[str, tuple[str, str]], client: str) -> str:
    """What `client` gets connecting to A: GREETING, or nc's "nc: timed out" for a dropped SYN."""
    from kubernetes.stream import stream

    namespace, _ = pods[client]
    _, address = pods["a"]
    command = ["/bin/busybox", "nc", "-w", str(CONNECT_TIMEOUT_S), address, str(PORT)]
    output = stream(
        core.connect_get_namespaced_pod_exec,
        client,
        namespace,
        command=command,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    return str(output).strip()


def test_a_policy_drops_other_namespaces_connections_until_it_is_deleted(
    cluster: Cluster, core: Any, pods: dict[str, tuple[str, str]]
) -> None:
    from kubernetes import client

    networking = client.NetworkingV1Api(cluster.api())
    assert reach(core, pods, "b") == GREETING
    assert reach(core, pods, "c") == GREETING

    policy = {
        "metadata": {"name": "listener-from-its-peers"},
        "spec": {
            "podSelector": {"matchLabels": LABELS},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": LABELS}}]}],
        },
    }
    networking.create_namespaced_network_policy(NAMESPACE, policy)
    try:
        # The agent sees the policy through its watch: within a connection attempt or two.
        wait_until(
            lambda: reach(core, pods, "b") == "nc: timed out",
            "B's connection to be dropped",
            30,
        )
        assert reach(core, pods, "c") == GREETING
    finally:
        networking.delete_namespaced_network_policy(policy["metadata"]["name"], NAMESPACE)
    wait_until(lambda: reach(core, pods, "b") == GREETING, "B to reach A again", 30)
