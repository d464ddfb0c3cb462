"""A real Kubernetes control plane on loopback: the one-machine cluster's (`make cluster`,
cluster/service.py) and the real-engine e2e suite's (tests/e2e/conftest.py).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the Kubeflow training operator,
Kubeflow Trainer v2 and JobSet (cluster/trainer_plane.py), Kueue (cluster/kueue_plane.py) and,
for the suite, kwok (fake nodes: pods get scheduled and reach
Running without a kubelet or containers) run as plain processes from the binaries
`scripts/e2e-tools.sh` builds, every port on 127.0.0.1. What Pulumi talks to is therefore a
genuine API server with the PyTorchJob, TrainJob, JobSet and Kueue CRDs, real admission
(Trainer's, JobSet's and Kueue's webhooks included), server-side apply, garbage collection, PV
binding, the Job controller and the operators' reconciliation. The API server reaches nodes and
pods only through an egress proxy (cluster/node_network.py), and `ControlPlane.real_node()`
adds a node whose pods really run (cluster/real_node.py). Trainer with JobSet, Kueue and the real
node are components the plane runs (cluster/plane_component.py): each sees the plane only through
its public side, and `add` starts it.

Use it as a context manager: `with ControlPlane(bin_dir, workdir) as cp:`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from builders.job_apis.pytorchjob import RESTRICTED_INIT_CONTAINER_TEMPLATE
from cluster.kueue_plane import Kueue
from cluster.node_network import NODE_NETWORK, NodeNamespaces
from cluster.plane_component import PlaneComponent
from cluster.processes import (
    STARTUP_TIMEOUT,
    ControlPlaneError,
    PlaneProcess,
    http_ok,
    launch,
    terminate,
    wait_for,
)
from cluster.real_node import RealNode
from cluster.stacks import CONTEXT
from cluster.trainer_plane import KubeflowTrainer
from cluster.volumes import persistent_volume, storage_class
from machine import procs
from machine.ports import free_port
from settings.stack import REPO_ROOT

TOOLS_SCRIPT = REPO_ROOT / "scripts" / "e2e-tools.sh"
OPERATOR_NAMESPACE = "kubeflow"
STORAGE_CLASS = "local-hostpath"
WEBHOOK_SECRET = "training-operator-webhook-cert"
# Where the operator's certificate rotator expects the Secret mounted (pkg/cert in v1.9, fixed).
WEBHOOK_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
# As root the operator runs in a mount namespace of its own with this plane's directory bound
# there, as a pod's secret volume is its own: two planes, or one starting while the last one's
# operator still rewrites its files, never read each other's certificates.
PRIVATE_CERT_DIR_SCRIPT = 'mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"'

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# The project's own kwok stages, played beside kwok's "fast" ones
# (cluster/kwok/pod-exit.yaml: a test ends a pod with the exit code it chooses).
PROJECT_STAGES = Path(__file__).resolve().parent / "kwok"
# The suite's fake nodes; the one-machine cluster has none (its pods run on the real node).
NODE_COUNT = 2
# Enough for the prod stack's pods (4 CPUs, 16Gi and 1 GPU each) on every fake node.
NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
# Volumes are kept (reclaimPolicy Retain, as a user's checkpoints are) and a released one never
# binds again, so each claim the e2e suite ever makes takes one for good: a claim left with none
# stays Pending, and the provider's wait for Bound fails `pulumi up` after 5 minutes ("timed
# out"). Every stack of the suite, and each `up` after a destroy that deleted its claim, takes
# one: the 6 there once were ran out in the last module.
PERSISTENT_VOLUMES = 40
# Where a real node (cluster/real_node.py) keeps its state, logs and namespaces, under the
# workdir.
REAL_NODE_DIR = "real-node"


def build_tools(*, quiet: bool = False) -> Path:
    """Build (or find cached) the e2e binaries and return their directory.

    The script prints progress on stderr (passed through, so a cold build shows what it does) and
    the bin directory as its last stdout line."""
    result = subprocess.run(
        ["bash", str(TOOLS_SCRIPT)],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else None,
        text=True,
    )
    return Path(result.stdout.strip().splitlines()[-1])


@dataclass
class ControlPlane:
    """Start with `with ControlPlane(bin_dir, workdir) as cp:`; `cp.kubeconfig` is ready then."""

    bin_dir: Path
    workdir: Path
    fake_nodes: int = NODE_COUNT
    kubeconfig: Path = field(init=False)
    volumes_dir: Path = field(init=False)
    server: str = field(init=False)
    _processes: list[PlaneProcess] = field(default_factory=list, init=False)
    _service_account_key: Path = field(init=False)
    # What stop_apiserver stopped: the command line start_apiserver runs again.
    _stopped_apiserver: list[str] = field(default_factory=list, init=False)
    # What runs on the plane besides its own processes (Trainer, Kueue, a real node), in the
    # order add started them.
    _components: list[PlaneComponent] = field(default_factory=list, init=False)
    _real_node: RealNode | None = field(default=None, init=False)
    # Whether Kueue runs here: started by add_kueue, when its first user needs it.
    kueue: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.volumes_dir = self.workdir / "volumes"
        self.server = ""
        self._service_account_key = self.workdir / "pki" / "service-account.key"

    @property
    def crd(self) -> Path:
        return self.bin_dir.parent / "crds" / "kubeflow.org_pytorchjobs.yaml"

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        token = secrets.token_hex(16)
        etcd_url = self._start_etcd()
        self._start_egress_proxy()
        self._start_apiserver(etcd_url, token)
        self._write_kubeconfig(token)
        self.start_process("kube-controller-manager", self._controller_manager_args())
        self.start_process("kube-scheduler", self.component_args())
        self._install_crd()
        self._prepare_operator_namespace()
        self._start_operator()
        self.add(KubeflowTrainer())
        if self.fake_nodes:
            self._start_kwok()
            self._create_nodes()
        self._create_storage()

    def stop(self) -> None:
        """Stop every component (newest first), then terminate the plane's processes and wait
        until none is left."""
        for component in reversed(self._components):
            component.stop()
        self._components.clear()
        terminate(self._processes)
        self._processes.clear()

    def add(self, component: PlaneComponent) -> None:
        """Start `component` on this plane; return once it is ready. It stops with the plane
        (before the plane's own processes), or with `remove`; one that fails to start is
        stopped with the plane as well."""
        self._components.append(component)
        component.start(self)

    def remove(self, component: PlaneComponent) -> None:
        """Stop `component` and forget it; the plane runs on."""
        try:
            component.stop()
        finally:
            if component in self._components:
                self._components.remove(component)

    def pids(self) -> list[int]:
        return [process.popen.pid for process in self._processes]

    # -- faults: a component stopped and started again (tests/e2e/test_faults.py) ---------------

    def stop_apiserver(self) -> None:
        """Kill the API server (SIGKILL), as a crash or a lost network would: every client,
        `pulumi up` included, gets connection refused until start_apiserver."""
        self._stopped_apiserver = self._stop_component("kube-apiserver", signal.SIGKILL)

    def start_apiserver(self) -> None:
        """Start the API server stop_apiserver stopped with the same command line (port,
        certificates, tokens, etcd), so the kubeconfig and every component's connection are
        valid again; return once it answers /readyz."""
        if not self._stopped_apiserver:
            raise ControlPlaneError("start_apiserver: the API server was not stopped")
        binary, *args = self._stopped_apiserver
        process = self.start_process(Path(binary).name, args)
        self._stopped_apiserver = []
        token = (self.workdir / "pki" / "tokens.csv").read_text().split(",", 1)[0]
        ca = self.workdir / "pki" / "apiserver.crt"
        self.wait_ready(
            process, "/readyz", lambda: http_ok(f"{self.server}/readyz", ca=ca, token=token)
        )

    def stop_operator(self) -> None:
        """Stop the training operator: PyTorchJobs are stored, nothing creates their pods."""
        self._stop_component("training-operator", signal.SIGTERM)

    def start_operator(self) -> None:
        """Start the training operator again; return once it is ready. It reconciles the jobs
        created while it was down."""
        self._start_operator()

    def _stop_component(self, name: str, stop_signal: signal.Signals) -> list[str]:
        """Stop one running component, wait until it is gone and forget it; its command line."""
        process = next((p for p in self._processes if p.name == name), None)
        if process is None:
            raise ControlPlaneError(f"{name} is not running")
        procs.stop(process.popen, grace=15, sig=stop_signal, session=True)
        process.log.close()
        self._processes.remove(process)
        return [str(arg) for arg in process.popen.args]

    # -- what a component uses (cluster/plane_component.py's Plane) -----------------------------

    def start_process(
        self,
        name: str,
        args: list[str],
        env: dict[str, str] | None = None,
        wrapper: list[str] | None = None,
        command: list[str] | None = None,
    ) -> PlaneProcess:
        """Start NAME from the bin directory (or `command`, e.g. a Python module) with `args`;
        it stops with the plane."""
        argv = [*(wrapper or []), *(command or [str(self.bin_dir / name)]), *args]
        process = launch(name, argv, workdir=self.workdir, env=env)
        self._processes.append(process)
        return process

    def wait_ready(self, process: PlaneProcess, what: str, ready: Callable[[], bool]) -> None:
        """Return once `ready()`; fail naming `process` if it exits first or never gets there."""
        wait_for(process, what, ready)

    @staticmethod
    def poll(what: str, ready: Callable[[], bool], timeout: float = STARTUP_TIMEOUT) -> None:
        """Return once `ready()` (its exceptions count as not yet); fail after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if ready():
                    return
            time.sleep(0.3)
        raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}")

    # -- the plane's own processes --------------------------------------------------------------

    def _start_etcd(self) -> str:
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        process = self.start_process(
            "etcd",
            [
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--name=default",
                "--quota-backend-bytes=2147483648",
                "--log-level=warn",
            ],
        )
        self.wait_ready(process, "health", lambda: http_ok(f"{url}/health"))
        return url

    def _start_apiserver(self, etcd_url: str, token: str) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        service_account_key = self._service_account_key
        if not service_account_key.exists():
            subprocess.run(
                ["openssl", "genrsa", "-out", str(service_account_key), "2048"],
                check=True,
                capture_output=True,
            )
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{token},admin,admin,"system:masters"\n')
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        process = self.start_process(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={pki}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={service_account_key}",
                f"--service-account-signing-key-file={service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                # Service IPs are only numbers kept in etcd here: nothing routes to them.
                "--service-cluster-ip-range=10.0.0.0/24",
                # The API server's own endpoints would be 127.0.0.1, which Endpoints forbid.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                # That plugin taints every new node not-ready until the node lifecycle controller
                # sees it Ready; here kwok is the kubelet and no lifecycle controller runs, so the
                # taint would never go and nothing would schedule.
                "--disable-admission-plugins=TaintNodesByCondition",
                # A namespace's annotations can steer its pods onto the real node (its node
                # selector and the toleration of its taint); other namespaces never land there.
                "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
                # Everything the API server sends to nodes and pods (logs, exec) goes through
                # the egress proxy, which reaches only loopback and the real node's namespace.
                f"--egress-selector-config-file={self._egress_selector_config()}",
                "--kubelet-preferred-address-types=InternalIP",
            ],
        )
        ca = pki / "apiserver.crt"
        self.wait_ready(
            process,
            "/readyz",
            lambda: ca.exists() and http_ok(f"{self.server}/readyz", ca=ca, token=token),
        )

    @property
    def real_node_dir(self) -> Path:
        return self.workdir / REAL_NODE_DIR

    @property
    def egress_socket(self) -> Path:
        """The API server's way to nodes and pods (cluster/node_network.py's egress proxy)."""
        return self.workdir / "egress.sock"

    def _start_egress_proxy(self) -> None:
        sock = self.egress_socket
        process = self.start_process(
            "egress-proxy",
            [
                f"--socket={sock}",
                f"--netns={NodeNamespaces(self.real_node_dir / 'ns').net}",
                f"--node-network={NODE_NETWORK}",
            ],
            command=[sys.executable, "-m", "cluster.node_network", "egress-proxy"],
            env={"PYTHONPATH": str(REPO_ROOT)},
        )
        self.wait_ready(process, "its socket", sock.exists)

    def _egress_selector_config(self) -> Path:
        path = self.workdir / "egress-selector.yaml"
        config = {
            "apiVersion": "apiserver.k8s.io/v1beta1",
            "kind": "EgressSelectorConfiguration",
            "egressSelections": [
                {
                    "name": "cluster",
                    "connection": {
                        "proxyProtocol": "HTTPConnect",
                        "transport": {"uds": {"udsName": str(self.egress_socket)}},
                    },
                }
            ],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    @contextlib.contextmanager
    def real_node(
        self,
        *,
        registry_user: str,
        registry_password: str,
        registry_port: int | None = None,
        exclusive: bool = True,
        cgroup: str | None = None,
        registry_dir: Path | None = None,
    ) -> Iterator[RealNode]:
        """A node with a kubelet, containerd and cluster DNS (cluster/real_node.py), and the
        authenticated registry it pulls from (on `registry_port`, else a free one); stopped on
        exit (or with the plane). `exclusive`: only pods of its own namespace land there (the
        suite's kwok scenarios stay on the fake nodes); otherwise every pod does. `cgroup`: the
        name of its cgroup root (default: a random one); `registry_dir`: where the registry keeps
        its images, kept after the node stops (default: the node's own, removed with it)."""
        if self._real_node is not None:
            raise ControlPlaneError("this control plane already has a real node")
        node = RealNode(
            self.real_node_dir,
            registry_user,
            registry_password,
            registry_port=registry_port,
            exclusive=exclusive,
            cgroup=cgroup,
            registry_dir=registry_dir,
        )
        self._real_node = node
        try:
            self.add(node)
            yield node
        finally:
            self.remove(node)
            self._real_node = None

    def _write_kubeconfig(self, token: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CONTEXT,
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.workdir / "pki" / "apiserver.crt"),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": "admin"}}],
            "current-context": CONTEXT,
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def component_args(self) -> list[str]:
        """What kube-controller-manager and kube-scheduler share (the real node's
        kube-controller-manager too): the admin kubeconfig for everything, one instance (no leader
        election), their own HTTPS port on loopback."""
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
        ]

    def _controller_manager_args(self) -> list[str]:
        return [
            *self.component_args(),
            f"--service-account-private-key-file={self._service_account_key}",
            f"--root-ca-file={self.workdir / 'pki' / 'apiserver.crt'}",
            "--use-service-account-credentials=false",
            # Only what the stack exercises: namespaces, service accounts and their tokens, PV
            # binding and the claim/volume protection finalizers, garbage collection (the
            # pods and services of a deleted job) and Jobs (a TrainJob's JobSet runs Jobs).
            "--controllers=namespace-controller,serviceaccount-controller,"
            "serviceaccount-token-controller,root-ca-certificate-publisher-controller,"
            "persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,"
            "persistentvolume-protection-controller,garbage-collector-controller,job-controller",
        ]

    @property
    def webhook_cert_dir(self) -> Path:
        """Where the operator reads its serving certificate, as this process sees it."""
        return self.workdir / "webhook-certs" if _private_mounts() else WEBHOOK_CERT_DIR

    def add_kueue(self) -> None:
        """Kueue on this plane, unless it runs already (cluster/kueue_plane.py); needs
        private_mounts. Not part of start(): most of the plane's users never queue, and a job
        that names no queue runs the same without it."""
        if not self.kueue:
            self.add(Kueue())
            self.kueue = True

    @property
    def private_mounts(self) -> bool:
        """Whether components can get mount namespaces of their own (root, util-linux's
        unshare)."""
        return _private_mounts()

    def private_dir_wrapper(self, fixed: Path, own: Path) -> list[str]:
        """The command prefix that runs a component with `own` (this plane's directory) bound at
        the `fixed` path it insists on, in a mount namespace of its own; needs private_mounts."""
        own.mkdir(parents=True, exist_ok=True)
        return [
            *("unshare", "--mount", "--propagation", "private", "--"),
            *("sh", "-c", PRIVATE_CERT_DIR_SCRIPT, "sh", str(fixed), str(own)),
        ]

    def _start_operator(self) -> None:
        probe = free_port()
        wrapper = None
        if _private_mounts():
            wrapper = self.private_dir_wrapper(WEBHOOK_CERT_DIR, self.webhook_cert_dir)
        process = self.start_process(
            "training-operator",
            [
                f"--kubeconfig={self.kubeconfig}",
                "--enable-scheme=pytorchjob",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{probe}",
                f"--webhook-server-port={free_port()}",
                *self._init_container_image_args(),
            ],
            env={"MY_POD_NAMESPACE": OPERATOR_NAMESPACE},
            wrapper=wrapper,
        )
        self.wait_ready(process, "its webhook certificate", self._mount_webhook_certificate)
        self.wait_ready(process, "/readyz", lambda: http_ok(f"http://127.0.0.1:{probe}/readyz"))

    def _init_container_image_args(self) -> list[str]:
        """The operator's init container (in every worker pod: it waits until the master's name
        resolves) from the image scripts/e2e-tools.sh builds, which the real node holds; its
        default, alpine:3.10, is on Docker Hub. Made from the template a namespace that enforces
        Pod Security "restricted" admits (docs/explanation/security.md's; the operator's own sets no
        securityContext), as the real node's namespace does."""
        template = self.workdir / "pytorch-init-container.yaml"
        template.write_text(RESTRICTED_INIT_CONTAINER_TEMPLATE)
        args = [f"--pytorch-init-container-template-file={template}"]
        ref = self.bin_dir.parent / "init-image" / "ref"
        if ref.exists():
            args.append(f"--pytorch-init-container-image={ref.read_text().strip()}")
        return args

    def _mount_webhook_certificate(self) -> bool:
        """Do what the kubelet's secret volume does for the operator's pod: once the rotator has
        filled in its Secret, put the files where it waits for them (its fixed CertDir)."""
        import base64

        from kubernetes import client

        secret = client.CoreV1Api(self.api()).read_namespaced_secret(
            WEBHOOK_SECRET, OPERATOR_NAMESPACE
        )
        data = secret.data or {}
        if "tls.crt" not in data:
            return False
        self.webhook_cert_dir.mkdir(parents=True, exist_ok=True)
        for name, value in data.items():
            (self.webhook_cert_dir / name).write_bytes(base64.b64decode(value))
        return True

    def _start_kwok(self) -> None:
        server = free_port()
        stages = sorted((self.bin_dir.parent / "kwok-stages").glob("*.yaml"))
        stages += sorted(PROJECT_STAGES.glob("*.yaml"))
        process = self.start_process(
            "kwok",
            [
                *(f"--config={stage}" for stage in stages),
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                f"--server-address=127.0.0.1:{server}",
                f"--node-port={free_port()}",
                "--node-ip=127.0.0.1",
                "--cidr=127.1.0.1/16",
            ],
        )
        self.wait_ready(process, "/healthz", lambda: http_ok(f"http://127.0.0.1:{server}/healthz"))

    # -- objects --------------------------------------------------------------------------------

    def api(self) -> Any:
        """A kubernetes.client.ApiClient for this control plane."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def _install_crd(self) -> None:
        from kubernetes import client, utils

        api = self.api()
        utils.create_from_yaml(api, str(self.crd))
        extensions = client.ApiextensionsV1Api(api)
        self.poll(
            "the PyTorchJob CRD to be established",
            lambda: any(
                condition.type == "Established" and condition.status == "True"
                for condition in extensions.read_custom_resource_definition(
                    "pytorchjobs.kubeflow.org"
                ).status.conditions
                or []
            ),
        )

    def _prepare_operator_namespace(self) -> None:
        """What the operator's own manifests install beside it: its namespace, the Secret its
        webhook certificate rotator fills in, and the webhook configuration it injects the CA
        into. The configuration lists no webhook: the API server cannot reach a webhook on
        loopback through a Service, and the policy pack enforces the same admission rules."""
        from kubernetes import client

        api = self.api()
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": OPERATOR_NAMESPACE}})
        core.create_namespaced_secret(OPERATOR_NAMESPACE, {"metadata": {"name": WEBHOOK_SECRET}})
        client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(
            {"metadata": {"name": "validator.training-operator.kubeflow.org"}, "webhooks": []}
        )

    def _create_nodes(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api())
        for index in range(self.fake_nodes):
            name = f"kwok-node-{index}"
            core.create_node(
                {
                    "metadata": {
                        "name": name,
                        "annotations": {KWOK_ANNOTATION: "fake"},
                        "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
                    },
                    "status": {"allocatable": NODE_CAPACITY, "capacity": NODE_CAPACITY},
                }
            )
        self.poll(
            "kwok to mark the nodes Ready",
            lambda: all(
                any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
                for node in core.list_node().items
            ),
        )

    def _create_storage(self) -> None:
        create_hostpath_storage(self.api(), self.volumes_dir)

    def volume_path(self, pv_name: str) -> Path:
        return self.volumes_dir / pv_name.removeprefix("local-")


def _private_mounts() -> bool:
    """Whether components can get mount namespaces of their own (root, util-linux's unshare)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


def create_hostpath_storage(api: Any, directory: Path, *, on_this_machine: bool = True) -> None:
    """A default StorageClass and pre-made hostPath volumes (ReadWriteOnce and ReadWriteMany), so
    claims bind as on a cluster with a provisioner. Each volume's directory is where its data
    lives: on this machine for the local control plane, inside the node for a one-node cluster
    such as kind (`on_this_machine=False`: the node creates the directory)."""
    from kubernetes import client

    client.StorageV1Api(api).create_storage_class(storage_class(STORAGE_CLASS, default=True))
    core = client.CoreV1Api(api)
    kind = "Directory" if on_this_machine else "DirectoryOrCreate"
    for index in range(PERSISTENT_VOLUMES):
        path = directory / f"pv-{index}"
        if on_this_machine:
            path.mkdir(parents=True, exist_ok=True)
        source = {"hostPath": {"path": str(path), "type": kind}}
        core.create_persistent_volume(persistent_volume(f"local-pv-{index}", STORAGE_CLASS, source))
