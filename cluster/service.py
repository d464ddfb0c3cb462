"""The one-machine cluster for users, in the background: `make cluster`, `make cluster-status`,
`make cluster-down` (`python -m cluster up|status|down|env|run`).

What runs: the control plane (cluster/control_plane.py: etcd, the API server, controller manager and
scheduler, the training operator, Kubeflow Trainer v2 with JobSet), a real node
(cluster/real_node.py: kubelet, containerd, CNI, CoreDNS, a NetworkPolicy agent) on which every pod
runs, the registry it pulls from (htpasswd authentication, user `local-robot`, 127.0.0.1:5000), and
podman's Docker-compatible API for image builds (cluster/docker_api.py). The binaries are the ones
scripts/e2e-tools.sh builds once into ~/.cache/pytorch-distributed/e2e (the e2e suite's: one build
serves both); the image builds start from the stand-in base image scripts/build-base-image.sh puts
in podman's store, tagged `localhost/pytorch-distributed-base:local` (Pulumi.local.yaml's).

Where: one directory of the clone, `.cluster/` (git-ignored): the supervisor's pid and log
(`cluster.log`), every component's log and state (`plane/`), the kubeconfig, the registry's
password (mode 0600, kept across restarts: the stack keeps it as its secret), the Docker API's
socket and `ready.json`, which says what is up. `up` starts a supervisor (`python -m
cluster serve`) in a session of its own, so the cluster outlives the shell and the `make`
that started it, and returns once everything answers; a second `up` says it is up. `down` sends
the supervisor SIGTERM, which stops everything newest first, then sweeps what a killed
supervisor would leave (every process of the cluster carries `PD_CLUSTER=<id>` in its
environment; the node's mounts and namespaces lie under the directory; its cgroup is named
after the directory) and says whether anything is left. Each `up` starts afresh: a new etcd and
new volumes, so the cluster's objects and checkpoints go with `down` (`make checkpoint` first);
only the registry's images stay (`.cluster/registry/`), as on a cluster whose registry lives on.

Linux, as root, with cgroup v1 hierarchies (the real node's needs); elsewhere one line says so and
points to kind (scripts/kind-up.sh).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from cluster import docker_api
from cluster.control_plane import TOOLS_SCRIPT, ControlPlane, build_tools
from cluster.kueue_plane import NODE_QUEUE, create_node_queue, node_queue_active
from cluster.node_network import NodeNamespaces
from cluster.processes import ControlPlaneError, launch, terminate, wait_for
from cluster.real_node import cgroup_dirs, cgroup_members, remove_cgroup, unsupported
from machine import procs
from settings.stack import REPO_ROOT, load_stack_file

STATE_DIR = REPO_ROOT / ".cluster"
# Pulumi.local.yaml names the registry (image.repository, registry.server) and its user.
REGISTRY_PORT = 5000
REGISTRY_USER = "local-robot"
BASE_IMAGE = "localhost/pytorch-distributed-base:local"
# Every process of the cluster inherits it from the supervisor: `down` finds what a killed one left.
TAG = "PD_CLUSTER"
READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 180.0
KIND = "scripts/kind-up.sh starts a kind cluster (Docker) for `make up STACK=dev` instead"


class ClusterError(Exception):
    """Why the cluster cannot start or stop, in one line; `exit_code` 2 for a machine it cannot
    run on (nothing was started), 1 for a start that failed."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def say(message: str) -> None:
    print(f"make cluster: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ClusterDir:
    """The cluster's directory and the files it keeps there."""

    path: Path

    @property
    def tag(self) -> str:
        """This directory's cluster among others (a clone each): a hash of its path."""
        return hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:16]

    @property
    def cgroup(self) -> str:
        return f"pytorch-distributed-cluster-{self.tag[:8]}"

    @property
    def pid_file(self) -> Path:
        return self.path / "supervisor.pid"

    @property
    def log(self) -> Path:
        return self.path / "cluster.log"

    @property
    def plane(self) -> Path:
        return self.path / "plane"

    @property
    def ready(self) -> Path:
        return self.path / "ready.json"

    @property
    def registry(self) -> Path:
        """The registry's config and images: kept across clusters, as a registry's are (a stack's
        image stays pushed, so a new cluster's `make up STACK=local` pulls it again)."""
        return self.path / "registry"

    @property
    def registry_password(self) -> Path:
        return self.path / "registry-password"

    @property
    def docker_socket(self) -> Path:
        return self.path / "podman.sock"

    def relative(self, path: Path | str) -> str:
        """`path` as the user sees it from the clone (absolute outside it)."""
        with contextlib.suppress(ValueError):
            return str(Path(path).relative_to(REPO_ROOT))
        return str(path)


@dataclass(frozen=True)
class Running:
    """What a started cluster offers (ready.json)."""

    supervisor: int
    kubeconfig: str
    server: str
    registry: str
    registry_user: str
    registry_password_file: str
    docker_host: str
    bin_dir: str

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """`base` with what a command needs to use the cluster: its kubeconfig, its Docker API,
        its tools (the Pulumi CLI and language host) first on PATH, and the registry password
        file scripts/pulumi-stack.sh sets the stack's secret from."""
        return {
            **with_tools(base, Path(self.bin_dir)),
            "KUBECONFIG": self.kubeconfig,
            "DOCKER_HOST": self.docker_host,
            "CLUSTER_REGISTRY_PASSWORD_FILE": self.registry_password_file,
        }

    def exports(self) -> str:
        return (
            f"export KUBECONFIG={self.kubeconfig} DOCKER_HOST={self.docker_host} "
            f'PATH="{self.bin_dir}:$PATH"'
        )


def with_tools(base: dict[str, str], bin_dir: Path) -> dict[str, str]:
    """`base` with the cluster's tools (the Pulumi CLI and its language hosts) first on PATH."""
    return {**base, "PATH": f"{bin_dir}{os.pathsep}{base.get('PATH', os.defpath)}"}


def unsupported_here() -> str | None:
    """One line for a machine the cluster cannot run on, naming kind instead."""
    problem = unsupported()
    if problem is None:
        return None
    return f"the one-machine cluster needs {problem}; {KIND}"


def is_supervisor(pid: int, directory: ClusterDir) -> bool:
    """`pid` runs, and is this directory's supervisor (not a process that reused its pid)."""
    try:
        process = psutil.Process(pid)
        return process.environ().get(TAG) == directory.tag and procs.is_alive(pid)
    except psutil.Error:
        return False


def supervisor_pid(directory: ClusterDir) -> int | None:
    try:
        pid = int(directory.pid_file.read_text())
    except (OSError, ValueError):
        return None
    return pid if is_supervisor(pid, directory) else None


def running(directory: ClusterDir) -> Running | None:
    """The cluster of `directory` once everything answered, while its supervisor runs."""
    if supervisor_pid(directory) is None:
        return None
    try:
        return Running(**json.loads(directory.ready.read_text()))
    except (OSError, ValueError, TypeError):
        return None


# -- up ---------------------------------------------------------------------------------------


def tools_bin_dir() -> Path:
    """The bin directory of the tool set scripts/e2e-tools.sh builds (built or not)."""
    done = subprocess.run(
        ["bash", str(TOOLS_SCRIPT), "--print"], capture_output=True, text=True, check=True
    )
    return Path(done.stdout.strip().splitlines()[-1])


def ensure_tools() -> Path:
    bin_dir = tools_bin_dir()
    if (bin_dir / "pulumi").exists() and (bin_dir / "kubelet").exists():
        return bin_dir
    say(
        "building the cluster's tools (the Pulumi CLI and its providers, Kubernetes, the "
        "operators, Kueue, CoreDNS) into ~/.cache/pytorch-distributed/e2e with "
        "scripts/e2e-tools.sh: the first time about an hour on 2 cores, a line a minute below; "
        "later runs reuse them"
    )
    return build_tools()


def ensure_base_image() -> None:
    """The stand-in base image in podman's store, tagged BASE_IMAGE (built once, then found)."""
    script = REPO_ROOT / "scripts" / "build-base-image.sh"
    env = {**os.environ, "PYTHON": sys.executable}
    built = subprocess.run(
        [str(script), "--print-if-built"], env=env, capture_output=True, text=True, check=False
    )
    if built.returncode != 0 or not built.stdout.strip():
        say(
            "building the stand-in base image (Debian, Python, torch: about 4 GB) into podman's "
            "store with scripts/build-base-image.sh: the first time 10 to 20 minutes"
        )
    done = subprocess.run(
        [str(script)], env=env, stdout=subprocess.PIPE, text=True, check=False, cwd=REPO_ROOT
    )
    if done.returncode != 0:
        raise ClusterError("scripts/build-base-image.sh failed (its output is above)")
    reference = done.stdout.strip().splitlines()[-1]
    tagged = subprocess.run(
        [*docker_api.podman(), "tag", reference, BASE_IMAGE],
        env=docker_api.environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if tagged.returncode != 0:
        raise ClusterError(f"podman tag {reference} {BASE_IMAGE}: {tagged.stderr.strip()}")


def provider_versions() -> dict[str, str]:
    """The Kubernetes and Docker providers the program's SDKs pin (requirements.txt)."""
    text = (REPO_ROOT / "requirements.txt").read_text()
    return dict(re.findall(r"^pulumi-(kubernetes|docker)==(\S+)$", text, re.MULTILINE))


def install_providers(bin_dir: Path, env: dict[str, str]) -> None:
    """`pulumi plugin install resource NAME VERSION --file ...` for the providers the tools built
    and the CLI's plugin directory (PULUMI_HOME, default ~/.pulumi) lacks: nothing is downloaded."""
    pulumi = str(bin_dir / "pulumi")
    listed = subprocess.run(
        [pulumi, "plugin", "ls", "--json"], env=env, capture_output=True, text=True, check=False
    )
    installed = set()
    with contextlib.suppress(ValueError):
        for plugin in json.loads(listed.stdout or "[]") or []:
            installed.add((plugin.get("kind"), plugin.get("name"), plugin.get("version")))
    for package, version in provider_versions().items():
        if ("resource", package, version) in installed:
            continue
        binary = bin_dir.parent / "providers" / f"pulumi-resource-{package}"
        argv = [pulumi, "plugin", "install", "resource", package, version, "--file", str(binary)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(argv[1:])}: {done.stderr.strip() or done.stdout}")


def registry_password(directory: ClusterDir) -> str:
    """The registry's password: made once (mode 0600) and kept, since the stack stores it."""
    path = directory.registry_password
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(secrets.token_urlsafe(18))
    return path.read_text().strip()


def last_error(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    return (errors or lines or ["no output"])[-1].removeprefix("error: ")


def up(directory: ClusterDir, registry_port: int = REGISTRY_PORT) -> tuple[Running, bool]:
    """Start the cluster unless it runs; (what it offers, whether this call started it)."""
    problem = unsupported_here()
    if problem is not None:
        raise ClusterError(problem, 2)
    current = running(directory)
    if current is not None:
        return current, False
    pid = supervisor_pid(directory)
    if pid is not None:
        raise ClusterError(
            f"the cluster's supervisor (pid {pid}) is still starting or stopping: wait for it, "
            "or `make cluster-down`"
        )
    if sweep(directory):
        say("cleared what a cluster stopped without `make cluster-down` left")
    # Afresh: the last cluster's etcd, volumes and logs would meet a new API server's objects.
    shutil.rmtree(directory.plane, ignore_errors=True)
    bin_dir = ensure_tools()
    ensure_base_image()
    install_providers(bin_dir, dict(os.environ))
    registry_password(directory)
    say(
        f"starting the control plane, the real node, the registry 127.0.0.1:{registry_port} and "
        f"podman's Docker API (about half a minute; log: {directory.relative(directory.log)})"
    )
    taken: PortTakenError | None = None
    for _ in range(START_ATTEMPTS):
        if taken is not None:
            say(f"{taken}; starting again on other ports")
            shutil.rmtree(directory.plane, ignore_errors=True)
        try:
            return start_supervisor(directory, registry_port), True
        except PortTakenError as error:
            taken = error
    raise ClusterError(str(taken))


class PortTakenError(ClusterError):
    """A component found the port chosen for it taken when it came to bind it: something
    outside the project's port ledger (machine/ports.py) took it meanwhile. Fresh ports fix it."""


# What a component that could not bind its port logs (Go's net package, Python's socket).
ADDRESS_IN_USE = re.compile(r"address already in use", re.IGNORECASE)
START_ATTEMPTS = 2


def chosen_port_taken(log: str, registry_port: int) -> bool:
    """The log says a component could not bind its port, and not the registry's (the user's
    choice, which another start would not change)."""
    lines = [line for line in log.splitlines() if ADDRESS_IN_USE.search(line)]
    registry = re.compile(rf":{registry_port}(?!\d)")
    return bool(lines) and not any(registry.search(line) for line in lines)


def start_supervisor(directory: ClusterDir, registry_port: int) -> Running:
    """Start the supervisor and wait until the cluster is up; a failed start is swept away."""
    with directory.log.open("wb") as log:
        supervisor = subprocess.Popen(
            [
                *(sys.executable, "-m", "cluster", "--dir", str(directory.path)),
                *("serve", "--registry-port", str(registry_port)),
            ],
            cwd=REPO_ROOT,
            env={**os.environ, TAG: directory.tag},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    directory.pid_file.write_text(f"{supervisor.pid}\n")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while (current := running(directory)) is None:
        if supervisor.poll() is not None:
            sweep(directory)
            log_name = directory.relative(directory.log)
            why = f"{last_error(directory.log)} (the whole log: {log_name})"
            if chosen_port_taken(directory.log.read_text(errors="replace"), registry_port):
                raise PortTakenError(f"a port of the cluster was taken before it was bound: {why}")
            raise ClusterError(f"the cluster did not start: {why}")
        if time.monotonic() > deadline:
            down(directory)
            raise ClusterError(
                f"the cluster was not up after {READY_TIMEOUT_S:.0f}s "
                f"(log: {directory.relative(directory.log)}); stopped it again"
            )
        time.sleep(0.5)
    return current


# -- the supervisor -----------------------------------------------------------------------------


@contextlib.contextmanager
def served_docker_api(directory: ClusterDir, registry: str) -> Iterator[str]:
    """podman's Docker API on the directory's socket, as a component of the cluster."""
    sock = directory.docker_socket
    sock.unlink(missing_ok=True)
    conf = docker_api.registries_conf(directory.path / "registries.conf", registry)
    process = launch(
        "podman-docker-api",
        docker_api.argv(sock),
        workdir=directory.path,
        env=docker_api.environment(conf),
    )
    try:
        wait_for(process, "its socket to answer", lambda: docker_api.answers(sock))
        yield f"unix://{sock}"
    finally:
        terminate([process])
        sock.unlink(missing_ok=True)


def serve(directory: ClusterDir, registry_port: int) -> int:
    """Run the cluster until SIGTERM or SIGINT, then stop all of it (the supervisor's body)."""

    # Both stop it through the teardown below; the first signal starts the teardown, which
    # further ones must not cut short. It may arrive at any moment, also before the pause.
    def stop(_signum: int, _frame: object) -> None:
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop_signal, signal.SIG_IGN)
        raise KeyboardInterrupt

    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, stop)
    directory.ready.unlink(missing_ok=True)
    password = directory.registry_password.read_text().strip()
    try:
        with (
            contextlib.suppress(KeyboardInterrupt),
            ControlPlane(tools_bin_dir(), directory.plane, fake_nodes=0) as plane,
            plane.real_node(
                registry_user=REGISTRY_USER,
                registry_password=password,
                registry_port=registry_port,
                exclusive=False,
                cgroup=directory.cgroup,
                registry_dir=directory.registry,
            ) as node,
            served_docker_api(directory, node.registry.address) as docker_host,
        ):
            plane.add_kueue()
            # The queue `job.queue: local` names, in the local stack's namespace.
            create_node_queue(plane, load_stack_file("local").namespace)
            started = Running(
                supervisor=os.getpid(),
                kubeconfig=str(plane.kubeconfig),
                server=plane.server,
                registry=node.registry.address,
                registry_user=REGISTRY_USER,
                registry_password_file=str(directory.registry_password),
                docker_host=docker_host,
                bin_dir=str(plane.bin_dir),
            )
            directory.ready.write_text(json.dumps(asdict(started), indent=2) + "\n")
            print("the one-machine cluster is up", flush=True)
            signal.pause()
    except (ControlPlaneError, OSError) as error:
        print(f"error: {str(error).splitlines()[0]}", flush=True)
        print(error, flush=True)
        return 1
    finally:
        directory.ready.unlink(missing_ok=True)
        print("the one-machine cluster stopped", flush=True)
    return 0


# -- down ---------------------------------------------------------------------------------------


def mounts_under(path: Path) -> list[str]:
    """Mount points at or under `path`, deepest first."""
    root = str(path.resolve())
    points = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4] == root or line.split()[4].startswith(root + "/")
    ]
    return sorted(set(points), key=lambda point: point.count("/"), reverse=True)


def sweep(directory: ClusterDir) -> bool:
    """Remove what a cluster of `directory` left (processes, mounts, namespaces, cgroups) once
    its supervisor is gone; whether there was anything."""
    found = False
    for _ in range(100):
        pids = [pid for pid in procs.tagged(TAG, directory.tag) if pid != os.getpid()]
        pids += cgroup_members(directory.cgroup)  # the pods' processes carry no tag
        if not pids:
            break
        found = True
        procs.signal_pids(pids, signal.SIGKILL)
        time.sleep(0.1)
    for point in mounts_under(directory.path):
        found = True
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    namespaces = NodeNamespaces(directory.plane / "real-node" / "ns")
    if namespaces.directory.exists():
        namespaces.destroy()
    if any(path.exists() for path in cgroup_dirs(directory.cgroup)):
        found = True
        remove_cgroup(directory.cgroup)
    directory.ready.unlink(missing_ok=True)
    directory.pid_file.unlink(missing_ok=True)
    directory.docker_socket.unlink(missing_ok=True)
    return found


def leftovers(directory: ClusterDir) -> list[str]:
    """What of the cluster still exists: processes, mounts (the node's namespaces are held by
    mounts), cgroups. Empty after `down`."""
    found = []
    for pid in procs.tagged(TAG, directory.tag):
        if pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            found.append(f"process {pid}: {' '.join(psutil.Process(pid).cmdline())}")
    found += [f"mount {point}" for point in mounts_under(directory.path)]
    found += [f"cgroup {path}" for path in cgroup_dirs(directory.cgroup) if path.exists()]
    return found


def down(directory: ClusterDir) -> tuple[bool, list[str]]:
    """Stop the cluster (SIGTERM to its supervisor, SIGKILL after STOP_TIMEOUT_S) and sweep;
    (whether one was running, what is left)."""
    pid = supervisor_pid(directory)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while procs.is_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.3)
        if procs.is_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    swept = sweep(directory)
    return pid is not None or swept, leftovers(directory)


# -- status -------------------------------------------------------------------------------------


def checks(current: Running) -> list[tuple[str, bool]]:
    """Each part of a running cluster and whether it answers."""
    from kubernetes import client, config

    from cluster.processes import http_ok
    from cluster.real_node import NODE_NAME

    def api_ready() -> bool:
        api = config.new_client_from_config(config_file=current.kubeconfig)
        return client.VersionApi(api).get_code().git_version is not None

    def node_ready() -> bool:
        api = config.new_client_from_config(config_file=current.kubeconfig)
        node = client.CoreV1Api(api).read_node(NODE_NAME)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def registry_answers() -> bool:
        import urllib.error

        try:
            return http_ok(f"http://{current.registry}/v2/")
        except urllib.error.HTTPError as error:
            return error.code == 401  # a challenge: it requires the password, as it should

    def quietly(check: Callable[[], bool]) -> bool:
        try:
            return check()
        except Exception:
            return False

    def queue_active() -> bool:
        api = config.new_client_from_config(config_file=current.kubeconfig)
        return node_queue_active(api, load_stack_file("local").namespace)

    socket = Path(current.docker_host.removeprefix("unix://"))
    return [
        (f"API server {current.server}", quietly(api_ready)),
        (f"node {NODE_NAME}", quietly(node_ready)),
        (f"registry {current.registry} (user {current.registry_user})", quietly(registry_answers)),
        (f"podman's Docker API {current.docker_host}", quietly(lambda: docker_api.answers(socket))),
        (f"Kueue, LocalQueue {NODE_QUEUE} (job.queue: {NODE_QUEUE})", quietly(queue_active)),
    ]
