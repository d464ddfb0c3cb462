"""The real node's NetworkPolicy agent: kube-network-policies, kubernetes-sigs' reference
implementation (sigs.k8s.io/kube-network-policies, upstream's binary as scripts/e2e-tools.sh
builds it), which enforces NetworkPolicy for any CNI. The node's CNI, the bridge plugin, enforces
none; with the agent a policy of the stack really stops a connection between the node's pods.

How it decides: the first packet of a new connection waits in an nfqueue (NFQUEUE_ID) until the
agent, from the API's pods, namespaces and policies, accepts or drops it; the rest of the
connection follows conntrack's verdict. So a policy applies to connections opened after it (an
established one lives on), and with the agent gone the queued packets are dropped (upstream's
default, fail closed).

How packets reach the queue: the agent installs an nftables table of its own (inet
`kube-network-policies`: a postrouting chain that queues the new connections of the pods some
policy selects) through the kernel's nftables `queue` expression, CONFIG_NFT_QUEUE. Kernels
without it refuse the whole table: this machine's (6.18, built without modules) does, the agent
logging `"syncing nftables rules" error=... no such file or directory` at each sync. So the node
queues by itself, with the xtables NFQUEUE target every kernel that runs containers has:
`divert_to_queue` adds two rules to its namespace's FORWARD chain (Debian's iptables, which
containernetworking-plugins depends on), so the first packet of every new connection between
two pods on the node's bridge goes to the agent, which accepts those of pods no policy selects.
Where the kernel has the queue expression, the agent's own chain queues the selected pods' first
packets once more, with the same verdict. Nothing from the node's own processes is forwarded,
so none is held (upstream's chain accepts root's, the kubelet's probes).

How it runs (cluster/real_node.py starts it with the node, as one of the node's processes):

- in the node's network namespace (cluster/node_network.py), where the pods' bridge is: its
  queue, the rules above and the kernel settings below are that namespace's, and go with it;
- with `net.bridge.bridge-nf-call-iptables` (and `-ip6tables`) at 1 in that namespace: a frame
  bridged from one pod to another crosses the IP hooks (br_netfilter), FORWARD among them,
  instead of only the bridge's. The setting is per network namespace: this machine's stays as
  it is. unsupported() in cluster/real_node.py asks for br_netfilter and iptables;
- reaching the API server as a pod does: upstream's main reads only the in-cluster
  configuration (rest.InClusterConfig; it has no kubeconfig flag). KUBERNETES_SERVICE_HOST and
  _PORT name the API server's port relayed onto the node's loopback, and in a mount namespace
  of its own the service account directory holds the CA and the plane's admin token (what the
  kubelet and CoreDNS use too), as a pod's projected token would;
- with the flags `agent_args` gives: the node's name (it judges for the pods bound to it), its
  queue, its metrics on the node's loopback; NRI is not used (see NO_NRI).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from cluster.node_network import NodeNamespaces
from cluster.processes import ControlPlaneError

BINARY = "kube-network-policies"
# The nfqueue the packets wait in. Queues are per network namespace and nothing else queues in
# the node's, so upstream's default does.
NFQUEUE_ID = 100
# Its Prometheus metrics (/metrics), on the node's loopback rather than upstream's ":9080" on
# every address, where the node's pods would reach it. Below the ports the relay takes there
# (this machine's free ports, from the kernel's ephemeral range).
METRICS_ADDRESS = "127.0.0.1:9080"
# Where client-go's in-cluster configuration reads the token and the CA (fixed paths).
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Frames bridged between the node's pods cross the IP hooks.
BRIDGE_SETTINGS = ("net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables")
# The node's own way into the queue (see the module's docstring): an established connection's
# packets pass; every new one's first packet waits for the agent's verdict (no --queue-bypass:
# with no agent listening it is dropped, as the agent's own chain does by default).
DIVERT_RULES = (
    ("-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"),
    ("-j", "NFQUEUE", "--queue-num", str(NFQUEUE_ID)),
)
# The agent asks the container runtime for pod addresses over NRI unless told not to, so that a
# pod's first packets are judged before the API server has its address. Debian's containerd 1.6
# has no NRI, and the node's private /run has no NRI socket (this machine's runtime is not the
# node's): pod addresses come from the API server (the pods' status.podIPs). v0.8.0 parses
# --disable-nri but does not pass it on (cmd/main.go leaves Config.NRIdisabled unset), so it
# still tries the socket once and logs "nri plugin exited: failed to connect to NRI service";
# the flag says what is meant and takes effect where upstream wires it.
NO_NRI = "--disable-nri"


def agent_args(node_name: str) -> list[str]:
    """The agent's flags (after its binary)."""
    return [
        f"--hostname-override={node_name}",
        f"--nfqueue-id={NFQUEUE_ID}",
        f"--metrics-bind-address={METRICS_ADDRESS}",
        NO_NRI,
        # Each queued packet's verdict in its log, with the pods it names (upstream's DaemonSet
        # runs it at 2 too): a line or two per new connection between the node's pods.
        "--v=2",
    ]


def api_environment(server: str) -> dict[str, str]:
    """Where the in-cluster configuration finds the API server: `server` (https://127.0.0.1:PORT
    here), which the node's relay serves at the same address in the node's namespace."""
    host, _, port = server.removeprefix("https://").rpartition(":")
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


def write_service_account(directory: Path, kubeconfig: Path) -> Path:
    """`directory` with what the in-cluster configuration reads from SERVICE_ACCOUNT_DIR: the
    kubeconfig's bearer token and its CA certificate."""
    config = yaml.safe_load(kubeconfig.read_text())
    token = config["users"][0]["user"]["token"]
    ca = Path(config["clusters"][0]["cluster"]["certificate-authority"])
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    (directory / "token").write_text(token)
    (directory / "token").chmod(0o600)
    (directory / "ca.crt").write_bytes(ca.read_bytes())
    return directory


def prepare_datapath(namespaces: NodeNamespaces) -> None:
    """In the node's network namespace only: BRIDGE_SETTINGS at 1, DIVERT_RULES in FORWARD."""
    try:
        for setting in BRIDGE_SETTINGS:
            namespaces.run("sh", "-c", f"echo 1 > /proc/sys/{setting}")
        for rule in DIVERT_RULES:
            namespaces.run("iptables", "-w", "-A", "FORWARD", *rule)
    except OSError as error:
        raise ControlPlaneError(f"the NetworkPolicy agent's datapath: {error}") from error


def queue_bound(namespaces: NodeNamespaces) -> bool:
    """Whether a process listens on NFQUEUE_ID in the node's namespace: the agent binds it once
    its caches have synced, so from then on it judges every queued packet."""
    table = namespaces.run("cat", "/proc/net/netfilter/nfnetlink_queue")
    return any(line.split()[:1] == [str(NFQUEUE_ID)] for line in table.splitlines())
