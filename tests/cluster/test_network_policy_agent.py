"""cluster/network_policy_agent.py without a node: what the agent is told of the API server (its
in-cluster configuration's environment and service account files) and of the node, and the
datapath it is given in a node's namespace (as root) and nowhere else. The agent at work on a
real node: tests/e2e/test_network_policy_agent.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cluster.network_policy_agent import (
    BRIDGE_SETTINGS,
    NFQUEUE_ID,
    agent_args,
    api_environment,
    prepare_datapath,
    write_service_account,
)
from cluster.node_network import NodeNamespaces


def test_the_api_server_is_named_as_a_pods_in_cluster_configuration_finds_it() -> None:
    assert api_environment("https://127.0.0.1:41234") == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "41234",
    }


def test_the_service_account_holds_the_kubeconfigs_token_and_ca_readable_by_root_alone(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "apiserver.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"cluster": {"certificate-authority": str(ca)}}],
                "users": [{"user": {"token": "t0ken"}}],
            }
        )
    )
    directory = write_service_account(tmp_path / "sa", kubeconfig)
    assert sorted(path.name for path in directory.iterdir()) == ["ca.crt", "token"]
    assert (directory / "token").read_text() == "t0ken"
    assert (directory / "ca.crt").read_text() == ca.read_text()
    assert directory.stat().st_mode & 0o777 == 0o700
    assert (directory / "token").stat().st_mode & 0o777 == 0o600


def test_the_agent_judges_for_its_node_on_its_queue() -> None:
    args = agent_args("real-node")
    assert "--hostname-override=real-node" in args
    assert f"--nfqueue-id={NFQUEUE_ID}" in args
    assert any(arg.startswith("--metrics-bind-address=127.0.0.1:") for arg in args)


def forward_chain(*prefix: str) -> str:
    argv = [*prefix, "iptables", "-w", "-S", "FORWARD"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("iptables"),
    reason="a node's namespaces need root, its datapath iptables",
)
@pytest.mark.skipif(
    not Path("/proc/sys/net/bridge").is_dir(), reason="no br_netfilter in this kernel"
)
def test_the_datapath_queues_new_forwarded_connections_in_the_nodes_namespace_alone(
    namespaces: NodeNamespaces,
) -> None:
    here = forward_chain()
    prepare_datapath(namespaces)
    inside = forward_chain(*namespaces.enter()).splitlines()
    assert inside[1:] == [
        "-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        f"-A FORWARD -j NFQUEUE --queue-num {NFQUEUE_ID}",
    ]
    for setting in BRIDGE_SETTINGS:
        assert namespaces.run("cat", f"/proc/sys/{setting}").strip() == "1"
    # (Compared by its queue rules: a container engine here may change its chain meanwhile.)
    assert forward_chain().count("NFQUEUE") == here.count("NFQUEUE")
