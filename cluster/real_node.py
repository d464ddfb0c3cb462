"""A real node: a kubelet with containerd runs pods, pulling from an authenticated loopback
registry, on a pod network of its own with cluster DNS.

The one-machine cluster (`make cluster`) runs every pod here. In the e2e suite it sits beside
kwok's nodes, which make pods "Running" without a container, for the pod-level scenarios (image
pull with the stack's Secret, the master found through its Service, checkpoints on the claim,
restarts) that need the real thing; there it is `exclusive`: only its own namespace's pods land
on it. `ControlPlane.real_node()` starts, and always tears down:

- the registry: cluster/local-registry.sh with htpasswd authentication, on this machine's
  loopback;
- the node's namespaces (cluster/node_network.py: NodeNamespaces): a network namespace
  holding the pods' bridge and every pod address, and a private mount namespace in which fresh
  tmpfs cover the fixed paths kubelet, containerd and the CNI plugins write to (/run, /var/lib,
  /var/log), and the kernel settings the kubelet insists on are files of its own: nothing of the
  node lands on this machine, and all of it goes with the namespaces;
- a relay of the API server's and the registry's loopback ports into the node's namespace, so
  the kubelet, containerd and CoreDNS reach them at the same 127.0.0.1 addresses;
- containerd (Debian's, with this module's config: state under the node's directory, the CRI
  plugin, the runc v2 shim, the registry over plain HTTP) with the images scripts/e2e-tools.sh
  builds imported: the sandbox ("pause") image and the image of the training operator's init
  container (the plane's operator is told to use it instead of Docker Hub's alpine);
- the NetworkPolicy agent, kube-network-policies (cluster/network_policy_agent.py), in the node's
  network namespace, where bridged traffic crosses netfilter and the first packet of each new
  connection between pods waits for its verdict: NetworkPolicies are enforced between the
  node's pods (on connections opened after a policy);
- the kubelet (cgroupfs driver under a cgroup root of its own, swap check off), registered as
  node `real-node`; when exclusive, labelled and tainted so that only pods of namespace
  `real-node` land there (that namespace's annotations give its pods the node selector and the
  toleration);
- CoreDNS with its kubernetes plugin at the node's address, the kubelet's cluster DNS, so the
  operator's headless per-replica Services (`<job>-master-0`) resolve; a second
  kube-controller-manager runs the EndpointSlice controller those records come from (kept off
  the plane's own, where kwok's loopback pod addresses would be refused);
- a StorageClass `real-node` with `local` volumes of its own on the node (the kubelet gives a
  local volume to a pod's fsGroup, as it does a block volume's, so the non-root trainer can write
  its claim); the cluster's default StorageClass when the node is all there is (`make cluster`);
- when exclusive, the namespace `real-node` whose pods alone land there, which enforces Pod
  Security "restricted" (the API server's PodSecurity admission), as many training namespaces do.

Network: this machine's namespace gains nothing but loopback listeners. The node's processes
and pods live in the node's namespace, which has no route beyond its bridge; the API server
reaches the kubelet only through its egress proxy (cluster/node_network.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from cluster import network_policy_agent
from cluster.node_network import NODE_IP, NODE_NETWORK, NodeNamespaces, entered_netns
from cluster.plane_component import Plane, PlaneComponent
from cluster.processes import (
    ControlPlaneError,
    PlaneProcess,
    http_ok,
    launch,
    terminate,
    wait_for,
)
from cluster.stacks import CONTEXT
from cluster.volumes import persistent_volume, storage_class
from machine import procs
from machine.ports import free_port
from settings.stack import REPO_ROOT

NODE_NAME = "real-node"
NAMESPACE = "real-node"
NODE_LABEL = ("pytorch-distributed.e2e/node", "real")
NODE_TAINT = {"key": "pytorch-distributed.e2e/real-node", "value": "true", "effect": "NoSchedule"}
STORAGE_CLASS = "real-node"
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
# The stacks of one module claim a few (the preemption scenario's second stack one more).
PERSISTENT_VOLUMES = 6
# A namespace's deletion waits for the namespace controller to empty it: seconds, here.
API_OBJECTS_GONE_TIMEOUT = 120.0
CLUSTER_DOMAIN = "cluster.local"
KUBELET_PORT = 10250
DNS_READY_PORT = 8181
REGISTRY_SCRIPT = Path(__file__).resolve().parent / "local-registry.sh"
CRI_NAMESPACE = "k8s.io"
# Paths kubelet, containerd, its shims and the CNI plugins write to whatever their config says
# (shim sockets and runc state in /run/containerd, /var/lib/cni, /var/log/containers): a fresh
# tmpfs on each inside the node's mount namespace.
PRIVATE_TMPFS = ("/run", "/var/lib", "/var/log")
# The kubelet's root directory (pods' volumes, its sockets), on the namespace's own /var/lib.
KUBELET_ROOT = Path("/var/lib/kubelet")
# What the kubelet sets these kernel settings to unless they already hold it (its container
# manager's "kernel tunables"); host-wide, so the node's mount namespace shows it files with these
# values instead and this machine's settings stay as they are.
KUBELET_KERNEL_SETTINGS = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}
CGROUP_ROOT = Path("/sys/fs/cgroup")
# br_netfilter's settings; absent where the module is not loaded.
BRIDGE_NETFILTER = Path("/proc/sys/net/bridge")
# Set on containerd; its shims inherit it, which is how stop() finds any that outlive it.
NODE_TAG = "PD_REAL_NODE"


@dataclass(frozen=True)
class NodeRegistry:
    """The registry the node pulls from: `address` is 127.0.0.1:PORT here and on the node."""

    address: str
    username: str
    password: str


class RealNode(PlaneComponent):
    """A component of the plane (cluster/plane_component.py), started with
    `ControlPlane.real_node(...)`; every path and process lives under `directory`."""

    name = NODE_NAME
    namespace = NAMESPACE
    storage_class = STORAGE_CLASS

    def __init__(
        self,
        directory: Path,
        registry_user: str,
        registry_password: str,
        *,
        registry_port: int | None = None,
        exclusive: bool = True,
        cgroup: str | None = None,
        registry_dir: Path | None = None,
    ) -> None:
        self._plane: Plane | None = None
        self.directory = directory
        self.exclusive = exclusive
        # A registry directory of the caller's keeps its images after stop (the one-machine
        # cluster's outlives each cluster); the node's own is removed with the node's state.
        self.registry_dir = registry_dir or directory / "registry"
        self._own_registry = registry_dir is None
        self.namespaces = NodeNamespaces(directory / "ns")
        port = registry_port or free_port()
        self.registry = NodeRegistry(f"127.0.0.1:{port}", registry_user, registry_password)
        self.cgroup = cgroup or f"pytorch-distributed-e2e-{secrets.token_hex(4)}"
        self.socket = directory / "containerd.sock"
        self._tag = secrets.token_hex(8)
        self._processes: list[PlaneProcess] = []
        self._started = False

    @property
    def plane(self) -> Plane:
        """The plane the node runs on (given to start)."""
        if self._plane is None:
            raise ControlPlaneError("the real node has not been started on a plane")
        return self._plane

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, plane: Plane) -> None:
        self._plane = plane
        problem = unsupported()
        if problem is not None:
            raise ControlPlaneError(f"a real node needs {problem}")
        if self.directory.exists():
            # A node stopped before leaves its logs and configs: a new one starts afresh.
            if os.path.ismount(self.namespaces.directory):
                raise ControlPlaneError(f"a real node still runs in {self.directory}")
            shutil.rmtree(self.directory)
        self.directory.mkdir(parents=True)
        for hidden in PRIVATE_TMPFS:
            if self.directory.resolve().is_relative_to(hidden):
                raise ControlPlaneError(f"the workdir must not be under {hidden}")
        self._started = True
        self._start_registry()
        self._create_namespaces()
        self._create_cgroup_root()
        self._start_relay()
        self._start_containerd()
        self._wait_until_api_objects_gone()
        if self.exclusive:
            self._create_namespace()
        self._create_volumes()
        self._start_endpointslice_controller()
        self._start_network_policy_agent()
        self._start_kubelet()
        self._start_coredns()

    def stop(self) -> None:
        """Stop everything, newest first, and remove what it made: containers, shims, mounts,
        namespaces, cgroups, the node's API objects. Safe to call twice."""
        if not self._started:
            return
        self._started = False
        kubelet = [process for process in self._processes if process.name == "kubelet"]
        terminate(kubelet)  # first, so it restarts nothing that is being removed
        self._remove_containers()
        terminate([process for process in self._processes if process.name != "kubelet"])
        self._processes.clear()
        self._kill_leftover_processes()
        self.namespaces.destroy()
        self._remove_cgroup_root()
        subprocess.run(
            [str(REGISTRY_SCRIPT), "stop", str(self.registry_dir)],
            capture_output=True,
            check=False,
        )
        self._remove_api_objects()
        for state in self._state_dirs():
            shutil.rmtree(state, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of the node still exists on this machine (empty after stop()): processes,
        mounts, namespaces, cgroups, image and container state."""
        found = []
        for pid in self._node_processes():
            with contextlib.suppress(psutil.Error):
                found.append(f"process {pid}: {' '.join(psutil.Process(pid).cmdline())}")
        found += [
            f"mount {line.split()[4]}"
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(str(self.directory))
        ]
        found += [f"cgroup {path}" for path in self._cgroup_dirs() if path.exists()]
        found += [
            f"state {path}"
            for path in (self.namespaces.directory, *self._state_dirs())
            if path.exists()
        ]
        return found

    def _state_dirs(self) -> list[Path]:
        """Gigabytes of image layers (the registry's, containerd's unpacked ones); stop() removes
        them, the logs and configs stay for a look afterwards. (The pods' volumes are on the
        namespace's /var/lib, gone with it.)"""
        owned = [self.registry_dir / "storage"] if self._own_registry else []
        return [self.directory / "containerd", *owned]

    # -- components -----------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> PlaneProcess:
        process = launch(name, argv, workdir=self.directory, env=env)
        self._processes.append(process)
        return process

    def _start_registry(self) -> None:
        port = self.registry.address.rpartition(":")[2]
        done = subprocess.run(
            [
                *(str(REGISTRY_SCRIPT), "start", str(self.registry_dir), port),
                *("--user", self.registry.username),
            ],
            env={**os.environ, "LOCAL_REGISTRY_PASSWORD": self.registry.password},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise ControlPlaneError(f"the registry did not start:\n{done.stdout}{done.stderr}")

    def _create_namespaces(self) -> None:
        self.namespaces.create()
        for path in PRIVATE_TMPFS:
            self.namespaces.run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", path)
        settings = self.directory / "kernel-settings"
        settings.mkdir()
        for name, value in KUBELET_KERNEL_SETTINGS.items():
            shown = settings / name.replace("/", ".")
            shown.write_text(f"{value}\n")
            self.namespaces.run("mount", "--bind", str(shown), f"/proc/sys/{name}")

    def _cgroup_dirs(self) -> list[Path]:
        return cgroup_dirs(self.cgroup)

    def _create_cgroup_root(self) -> None:
        for path in self._cgroup_dirs():
            path.mkdir()
            for inherited in ("cpuset.cpus", "cpuset.mems"):  # empty in a new cpuset cgroup
                if (path / inherited).exists():
                    (path / inherited).write_text((path.parent / inherited).read_text())

    def _start_relay(self) -> None:
        ports = [self.plane.server.rpartition(":")[2], self.registry.address.rpartition(":")[2]]
        process = self._start(
            "node-relay",
            [
                *(sys.executable, "-m", "cluster.node_network", "relay"),
                f"--netns={self.namespaces.net}",
                *(f"--port={port}" for port in ports),
            ],
            env={"PYTHONPATH": str(REPO_ROOT)},
        )
        wait_for(process, "its listeners", lambda: "relaying" in process.tail())

    def expose_to_pods(self, port: int) -> str:
        """This machine's loopback service on `port` (the suite's S3 server), reachable from the
        node's pods at the node's address: its URL there. Stopped with the node."""
        process = self._start(
            f"pod-relay-{port}",
            [
                *(sys.executable, "-m", "cluster.node_network", "relay"),
                f"--netns={self.namespaces.net}",
                f"--node-port={port}",
            ],
            env={"PYTHONPATH": str(REPO_ROOT)},
        )
        wait_for(process, "its listener", lambda: "relaying" in process.tail())
        return f"http://{NODE_IP}:{port}"

    @property
    def _containerd_dir(self) -> Path:
        return self.directory / "containerd"

    def _write_containerd_config(self) -> Path:
        state = self._containerd_dir
        registry_hosts = state / "certs.d" / self.registry.address
        registry_hosts.mkdir(parents=True)
        (registry_hosts / "hosts.toml").write_text(
            f'server = "http://{self.registry.address}"\n\n'
            f'[host."http://{self.registry.address}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )
        cni_conf = self.directory / "cni" / "net.d"
        cni_conf.mkdir(parents=True)
        (cni_conf / "10-pd-e2e.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        bin_dir = self.plane.bin_dir
        config = state / "config.toml"
        config.write_text(
            f"""version = 2
root = "{state / "root"}"
state = "{state / "state"}"
temp = "{state / "tmp"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{self.socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state / "opt"}"

[{cri}]
  sandbox_image = "{self._pause_image_ref()}"
  netns_mounts_under_state_dir = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  # Never below containerd's own: root may lack CAP_SYS_RESOURCE (as on CI's machines), and the
  # sandbox's default -998 then fails every pod.
  restrict_oom_score_adj = true
  [{cri}.cni]
    bin_dir = "{(bin_dir.parent / "cni").resolve()}"
    conf_dir = "{cni_conf}"
  [{cri}.containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"
    discard_unpacked_layers = true  # the compressed layers once unpacked: gigabytes
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{(bin_dir / "runc").resolve()}"
        SystemdCgroup = false
  [{cri}.registry]
    config_path = "{state / "certs.d"}"
"""
        )
        return config

    def _cni_config(self) -> dict[str, Any]:
        """A bridge in the node's namespace and addresses from its network; no default route,
        so a pod reaches its peers and the node's address and nothing else."""
        return {
            "cniVersion": "1.0.0",
            "name": "pd-e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "pd-br0",
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.directory / "cni" / "ipam"),
                        "ranges": [
                            [
                                {
                                    "subnet": str(NODE_NETWORK),
                                    "rangeStart": str(NODE_IP + 9),
                                    "gateway": str(NODE_IP),
                                }
                            ]
                        ],
                    },
                }
            ],
        }

    def _pause_image_ref(self) -> str:
        return (self.plane.bin_dir.parent / "pause" / "ref").read_text().strip()

    def ctr(self, *args: str) -> str:
        """containerd's own CLI on the node's CRI namespace."""
        done = subprocess.run(
            [
                *self.namespaces.enter(),
                str(self.plane.bin_dir / "ctr"),
                f"--address={self.socket}",
                f"--namespace={CRI_NAMESPACE}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise ControlPlaneError(f"ctr {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def images(self) -> list[str]:
        """References of the images the node holds."""
        return self.ctr("images", "list", "--quiet").split()

    def _start_containerd(self) -> None:
        config = self._write_containerd_config()
        process = self._start(
            "containerd",
            [
                *self.namespaces.enter(),
                str(self.plane.bin_dir / "containerd"),
                f"--config={config}",
            ],
            env={NODE_TAG: self._tag, "PATH": f"{self.plane.bin_dir}:{os.environ['PATH']}"},
        )
        wait_for(process, "its socket", self.socket.exists)
        wait_for(process, "its start", lambda: "successfully booted" in process.tail(200))
        # Images no registry here serves: the sandbox's, and the operator's init container's.
        for image in ("pause", "init-image"):
            self.ctr("images", "import", str(self.plane.bin_dir.parent / image / "image.tar"))

    def _create_namespace(self) -> None:
        """The namespace whose pods alone land on this node (exclusive)."""
        from kubernetes import client

        core = client.CoreV1Api(self.plane.api())
        key, value = NODE_LABEL
        core.create_namespace(
            {
                "metadata": {
                    "name": NAMESPACE,
                    "labels": {POD_SECURITY_ENFORCE: "restricted"},
                    "annotations": {
                        "scheduler.alpha.kubernetes.io/node-selector": f"{key}={value}",
                        "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(
                            [{**NODE_TAINT, "operator": "Equal"}]
                        ),
                    },
                }
            }
        )

    def _create_volumes(self) -> None:
        """`local` volumes on this node for its pods' claims: unlike hostPath, the kubelet gives
        a local volume to the pod's fsGroup, so the non-root trainer can write its claim."""
        from kubernetes import client

        api = self.plane.api()
        core = client.CoreV1Api(api)
        client.StorageV1Api(api).create_storage_class(storage_class(STORAGE_CLASS))
        on_this_node = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": [NODE_NAME],
                            }
                        ]
                    }
                ]
            }
        }
        for index in range(PERSISTENT_VOLUMES):
            path = self.directory / "volumes" / f"pv-{index}"
            path.mkdir(parents=True)
            source = {"local": {"path": str(path)}, "nodeAffinity": on_this_node}
            core.create_persistent_volume(
                persistent_volume(f"{STORAGE_CLASS}-pv-{index}", STORAGE_CLASS, source)
            )

    def _start_endpointslice_controller(self) -> None:
        process = self._start(
            "kube-controller-manager-endpointslices",
            [
                str(self.plane.bin_dir / "kube-controller-manager"),
                *self.plane.component_args(),
                "--controllers=endpointslice-controller",
            ],
        )
        wait_for(process, "its start", lambda: "Started controller" in process.tail(200))

    def _start_network_policy_agent(self) -> None:
        """Before the kubelet, so that a policy holds from the node's first pod on."""
        agent = network_policy_agent
        agent.prepare_datapath(self.namespaces)
        service_account = agent.write_service_account(
            self.directory / "network-policy-agent", self.plane.kubeconfig
        )
        process = self._start(
            agent.BINARY,
            [
                *self.namespaces.enter(),
                *self.plane.private_dir_wrapper(agent.SERVICE_ACCOUNT_DIR, service_account),
                str(self.plane.bin_dir / agent.BINARY),
                *agent.agent_args(NODE_NAME),
            ],
            # The tag: stop() finds it among the node's processes should it outlive its SIGTERM.
            env={NODE_TAG: self._tag, **agent.api_environment(self.plane.server)},
        )
        wait_for(
            process,
            f"its nfqueue {agent.NFQUEUE_ID}",
            lambda: agent.queue_bound(self.namespaces),
        )

    def _start_kubelet(self) -> None:
        # Inside the node's mount namespace, on its private /var/lib, as on a node: the kubelet
        # binds unix sockets under its root (pod-resources/NNN), whose path must fit in 108
        # bytes; under the workdir, a deep checkout (or a pytest-xdist worker's directory) ends
        # the kubelet with "bind: invalid argument".
        kubelet_dir = KUBELET_ROOT
        resolv_conf = self.directory / "resolv.conf"
        resolv_conf.write_text("")  # pods search only the cluster's domains
        config = self.directory / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config(kubelet_dir, resolv_conf)))
        key, value = NODE_LABEL
        process = self._start(
            "kubelet",
            [
                *self.namespaces.enter(),
                str(self.plane.bin_dir / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={self.plane.kubeconfig}",
                f"--root-dir={kubelet_dir}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                f"--node-labels={key}={value}",
                "--v=1",
            ],
        )
        wait_for(process, "a Ready node", self._node_ready)

    def _kubelet_config(self, kubelet_dir: Path, resolv_conf: Path) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": str(NODE_IP),
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "oomScoreAdj": 0,  # as containerd's: lowering it needs CAP_SYS_RESOURCE
            # The API server reaches it only through the egress proxy, from inside the node's
            # namespace; the kubelet's own serving certificate is self-signed.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "failSwapOn": False,
            "failCgroupV1": False,
            "clusterDNS": [str(NODE_IP)],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(resolv_conf),
            "podLogsDir": str(self.directory / "pod-logs"),
            "volumePluginDir": str(kubelet_dir / "volume-plugins"),
            "registerWithTaints": [NODE_TAINT] if self.exclusive else [],
            "maxPods": 16,
            "serializeImagePulls": False,
            # The node shares this machine: never evict for disk or memory others use, never
            # collect the images the scenarios pulled.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
        }

    def _node_ready(self) -> bool:
        from kubernetes import client

        node = client.CoreV1Api(self.plane.api()).read_node(NODE_NAME)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def _start_coredns(self) -> None:
        corefile = self.directory / "Corefile"
        corefile.write_text(
            f""".:53 {{
    bind {NODE_IP}
    ready {NODE_IP}:{DNS_READY_PORT}
    errors
    log
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.plane.kubeconfig} {CONTEXT}
        ttl 5
    }}
}}
"""
        )
        process = self._start(
            "coredns",
            [*self.namespaces.enter(), str(self.plane.bin_dir / "coredns"), f"-conf={corefile}"],
        )

        def ready() -> bool:
            with entered_netns(self.namespaces.net):
                return http_ok(f"http://{NODE_IP}:{DNS_READY_PORT}/ready")

        wait_for(process, "/ready", ready)

    # -- teardown -------------------------------------------------------------------------------

    def _remove_containers(self) -> None:
        """Kill every pod's containers (runc) and remove them, while containerd still runs."""
        containerd = next((p for p in self._processes if p.name == "containerd"), None)
        if containerd is None or containerd.popen.poll() is not None:
            return
        with contextlib.suppress(ControlPlaneError, subprocess.TimeoutExpired):
            for container in self.ctr("containers", "list", "--quiet").split():
                with contextlib.suppress(ControlPlaneError):
                    self.ctr("tasks", "kill", "--signal", "SIGKILL", container)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    try:
                        self.ctr("tasks", "delete", container)
                        break
                    except ControlPlaneError as error:
                        if "not found" in str(error):
                            break
                        time.sleep(0.2)
                with contextlib.suppress(ControlPlaneError):
                    self.ctr("containers", "delete", container)

    def _node_processes(self) -> list[int]:
        """Shims (which inherit containerd's tag) and whatever runs in the node's cgroups."""
        return sorted({*procs.tagged(NODE_TAG, self._tag), *cgroup_members(self.cgroup)})

    def _kill_leftover_processes(self) -> None:
        for _ in range(50):
            pids = [pid for pid in self._node_processes() if psutil.pid_exists(pid)]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def _remove_cgroup_root(self) -> None:
        remove_cgroup(self.cgroup)

    def _remove_api_objects(self) -> None:
        """The plane may stay up after the node: its pods (no kubelet will end them) and the
        node go, its volumes, and when exclusive its namespace, so the fast scenarios see the
        plane as it was."""
        from kubernetes import client

        with contextlib.suppress(Exception):
            api = self.plane.api()
            core = client.CoreV1Api(api)
            on_node = f"spec.nodeName={NODE_NAME}"
            for pod in core.list_pod_for_all_namespaces(field_selector=on_node).items:
                with contextlib.suppress(client.ApiException):
                    core.delete_namespaced_pod(
                        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                    )
            removals = [
                lambda: core.delete_node(NODE_NAME),
                lambda: client.StorageV1Api(api).delete_storage_class(STORAGE_CLASS),
                *(
                    (lambda i=i: core.delete_persistent_volume(f"{STORAGE_CLASS}-pv-{i}"))
                    for i in range(PERSISTENT_VOLUMES)
                ),
            ]
            if self.exclusive:
                removals.append(lambda: core.delete_namespace(NAMESPACE))
            for remove in removals:
                with contextlib.suppress(client.ApiException):
                    remove()
            # A volume a retained claim still binds would wait for that claim forever: the
            # directory behind it is removed with the node anyway.
            for index in range(PERSISTENT_VOLUMES):
                with contextlib.suppress(client.ApiException):
                    core.patch_persistent_volume(
                        f"{STORAGE_CLASS}-pv-{index}", {"metadata": {"finalizers": None}}
                    )
        with contextlib.suppress(ControlPlaneError):  # the next start names what is left
            self._wait_until_api_objects_gone()

    def _api_objects_left(self) -> list[str]:
        """This node's API objects that still exist (a namespace takes seconds to empty)."""
        from kubernetes import client

        api = self.plane.api()
        core = client.CoreV1Api(api)
        reads = {
            **(
                {f"namespace {NAMESPACE}": lambda: core.read_namespace(NAMESPACE)}
                if self.exclusive
                else {}
            ),
            f"storage class {STORAGE_CLASS}": lambda: client.StorageV1Api(api).read_storage_class(
                STORAGE_CLASS
            ),
            **{
                f"volume {STORAGE_CLASS}-pv-{i}": (
                    lambda i=i: core.read_persistent_volume(f"{STORAGE_CLASS}-pv-{i}")
                )
                for i in range(PERSISTENT_VOLUMES)
            },
        }
        left = []
        for what, read in reads.items():
            try:
                read()
            except client.ApiException as error:
                if error.status == 404:
                    continue
                raise
            left.append(what)
        return left

    def _wait_until_api_objects_gone(self) -> None:
        """A node started right after another (the next module's) creates the same names: it
        must not meet the previous node's objects while they are being deleted."""
        deadline = time.monotonic() + API_OBJECTS_GONE_TIMEOUT
        left: list[str] = []
        while time.monotonic() < deadline:
            try:
                left = self._api_objects_left()
            except Exception:  # the plane itself is gone, and nothing of it with it
                return
            if not left:
                return
            time.sleep(0.3)
        raise ControlPlaneError(
            f"the previous real node's {', '.join(left)} still exist "
            f"{API_OBJECTS_GONE_TIMEOUT:.0f}s after their deletion"
        )


def unsupported() -> str | None:
    """What this machine lacks for a real node (root, util-linux's nsenter and unshare, cgroup
    v1, br_netfilter and iptables for its NetworkPolicy agent), in words that follow "needs";
    None when it has everything."""
    if sys.platform != "linux":
        return f"Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "root (namespaces, mounts, cgroups)"
    if not shutil.which("nsenter") or not shutil.which("unshare"):
        return "util-linux's nsenter and unshare"
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return (
            "cgroup v1 hierarchies (this machine mounts cgroup v2 at "
            f"{CGROUP_ROOT}, which the real node does not support)"
        )
    if not shutil.which("iptables"):
        return "iptables (Debian's, which containernetworking-plugins depends on)"
    if not BRIDGE_NETFILTER.is_dir():
        return (
            f"the kernel's br_netfilter (no {BRIDGE_NETFILTER}: `modprobe br_netfilter`), through "
            "which its NetworkPolicy agent sees traffic between pods on the node's bridge"
        )
    return None


def cgroup_dirs(name: str) -> list[Path]:
    """A cgroup `name` in every hierarchy (cgroup v1: one per controller, some of them reached
    through a symbolic link such as cpu -> cpu,cpuacct)."""
    hierarchies = {path.resolve() for path in CGROUP_ROOT.iterdir() if path.is_dir()}
    return [hierarchy / name for hierarchy in sorted(hierarchies)]


def cgroup_members(name: str) -> list[int]:
    """The processes in cgroup `name` and its children, in any hierarchy."""
    pids: set[int] = set()
    for path in cgroup_dirs(name):
        for procs_file in path.rglob("cgroup.procs") if path.exists() else ():
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(pid) for pid in procs_file.read_text().split())
    return sorted(pids)


def remove_cgroup(name: str) -> None:
    """Remove cgroup `name` and its children in every hierarchy (their processes must be gone)."""
    for path in cgroup_dirs(name):
        if not path.exists():
            continue
        # Deepest first: a cgroup directory goes only once it has no children.
        for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
        with contextlib.suppress(OSError):
            path.rmdir()
