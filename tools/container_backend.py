"""Each pod of a job (PyTorchJob or TrainJob) as a container of the training image
(`--backend container`).

What a pod gets on the cluster, given to a container here:

* the image's entrypoint replaced by the container's `command`, its CMD by `args`, its working
  directory by `workingDir` (Kubernetes semantics);
* the container's own env, then what the job's controller injects (the job API's `pods`), the
  controller's entries winning, and HOSTNAME = the pod name;
* the checkpoint claim's `mountPath` bound to the local checkpoint root, a memory-backed
  /dev/shm as large as its emptyDir's sizeLimit (or `DEFAULT_SHM_SIZE`);
* rank 0 reachable by its name (`<job>-master-0`, a TrainJob's `<job>-node-0-0.<job>`): every
  container shares the host's
  network (`--network host`, so all traffic stays on loopback and no container bridge or private
  address range is involved) and resolves that name to 127.0.0.1 (`--add-host`). With one
  network the rendezvous port must be free on this machine, so the job gets a free port instead
  of the container port.

The supervisor (`tools.supervisor`) runs each `<engine> run` in the foreground like a local
process: the engine streams the container's output, proxies SIGTERM to it (`--sig-proxy`, the
default of an attached run) and exits with the container's exit code (137 for a SIGKILLed one).
Containers live outside the supervisor's process tree, so each replica also carries a teardown
command (`<engine> rm --force`) that the supervisor runs whenever the replica exits and when the
job ends: no container outlives its run. The supervisor's replica tag is passed into the
container too, so where the engine runs containers as local processes (podman) the supervisor's
own process sweep reaches them as well.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.job_apis import PodRole, api_of_job
from tools.supervisor import REPLICA_TAG, ReplicaCommand

ENGINES = ("podman", "docker")
DEFAULT_SHM_SIZE = "1g"
LOOPBACK = "127.0.0.1"
LABEL_PREFIX = "pytorch-distributed.run-local"
# Values a pod gets from its own metadata (the downward API); nothing else is resolvable here.
_FIELD_REFS = ("metadata.name", "metadata.namespace")
DEFAULTS_FILE = Path(__file__).resolve().parent / "containers" / "defaults.env"


def read_defaults(path: Path = DEFAULTS_FILE) -> dict[str, str]:
    """The NAME=value lines of tools/containers/defaults.env, which the Makefile and the scripts
    read as well: the image name, podman's runtime and configuration files live there once."""
    lines = path.read_text(encoding="utf-8").splitlines()
    pairs = (line.partition("=") for line in lines if line.strip() and not line.startswith("#"))
    return {name.strip(): value.strip() for name, _, value in pairs}


DEFAULTS = read_defaults()
DEFAULT_IMAGE = DEFAULTS["TRAINER_IMAGE"]
DEFAULT_RUNTIME = DEFAULTS["DEFAULT_CONTAINER_RUNTIME"]


class ContainerBackendError(ValueError):
    """The container backend cannot run as asked; the message names the setting and the fix."""


@dataclass(frozen=True)
class Engine:
    """The container engine's command line: `podman [--runtime R]` or `docker`."""

    name: str
    runtime: str | None = None

    @property
    def argv(self) -> list[str]:
        if self.runtime and self.name == "podman":
            return [self.name, "--runtime", self.runtime]
        return [self.name]


def resolve_engine(name: str | None, runtime: str | None) -> Engine:
    """The engine asked for (`--engine`), else podman, else docker, whichever is installed."""
    if name is not None and name not in ENGINES:
        raise ContainerBackendError(f"--engine = {name!r}: allowed: {', '.join(ENGINES)}")
    candidates = [name] if name is not None else list(ENGINES)
    for candidate in candidates:
        if shutil.which(candidate) is not None:
            if runtime and candidate != "podman":
                raise ContainerBackendError(
                    f"--container-runtime = {runtime!r} is a podman option; {candidate} picks its "
                    "runtime in its daemon's configuration: drop the flag"
                )
            return Engine(candidate, runtime or None)
    wanted = name or " or ".join(ENGINES)
    raise ContainerBackendError(
        f"--backend container needs {wanted} on PATH (the engine, --engine, is not installed)"
    )


def run_id() -> str:
    """A short token that makes this run's container names unique on the machine."""
    return uuid.uuid4().hex[:8]


def container_name(pod: str, run: str) -> str:
    return f"{pod}-{run}"


def _shm_size(template: Mapping[str, Any]) -> str:
    for volume in template["spec"].get("volumes", []):
        empty_dir = volume.get("emptyDir")
        if empty_dir is not None and empty_dir.get("medium") == "Memory":
            return str(empty_dir.get("sizeLimit", DEFAULT_SHM_SIZE)).replace("Gi", "g")
    return DEFAULT_SHM_SIZE


def claim_mount_paths(template: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
    """Where ``container`` mounts the pod's persistent volume claims: the paths both backends
    back with the local checkpoint root."""
    claims = {
        volume["name"]
        for volume in template["spec"].get("volumes", [])
        if "persistentVolumeClaim" in volume
    }
    return [m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in claims]


def container_env(
    container: Mapping[str, Any],
    *,
    pod: str,
    namespace: str,
    map_value: Callable[[str], str] = str,
) -> tuple[dict[str, str], list[str]]:
    """The container's own env as the kubelet resolves it (values, and the downward API's pod
    name and namespace), each value passed through ``map_value``; notices for what is skipped.
    One home for both backends: the process backend maps paths to the host's, containers don't."""
    env: dict[str, str] = {}
    notices: list[str] = []
    fields = dict(zip(_FIELD_REFS, (pod, namespace), strict=True))
    for entry in container.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = map_value(str(entry["value"]))
            continue
        field_path = entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if field_path in fields:
            env[name] = fields[field_path]
        else:
            notices.append(f"env {name} comes from {entry.get('valueFrom')}: not set locally")
    return env, notices


def replica_env(
    job: Mapping[str, Any],
    role: PodRole,
    *,
    namespace: str,
    master_port: int,
    master_addr: str | None = None,
    map_value: Callable[[str], str] = str,
) -> tuple[dict[str, str], list[str]]:
    """A pod's environment as both backends start it: the pod's hostname, the container's own
    env, then the operator's (which wins), with the rendezvous (the master's, or an elastic
    job's c10d endpoint) moved to ``master_port`` (and ``master_addr`` where the pod name does
    not resolve to it)."""
    api = api_of_job(job)
    pod = role.name
    own, notices = container_env(role.container, pod=pod, namespace=namespace, map_value=map_value)
    injected = dict(role.env)
    for key in api.master_port_keys:
        if key in injected:
            injected[key] = str(master_port)
    if master_addr is not None:
        for key in api.master_addr_keys:
            if key in injected:
                injected[key] = master_addr
    if "PET_RDZV_ENDPOINT" in injected:
        host = master_addr or injected["PET_RDZV_ENDPOINT"].rpartition(":")[0]
        injected["PET_RDZV_ENDPOINT"] = f"{host}:{master_port}"
    return {"HOSTNAME": pod, **own, **injected}, notices


def replica_commands(
    job: Mapping[str, Any],
    *,
    engine: Engine,
    image: str,
    namespace: str,
    checkpoint_root: Path,
    master_port: int,
    run: str,
    workdir: Path,
    extra_env: Mapping[str, str] | None = None,
    runtime: Mapping[str, Any] | None = None,
) -> tuple[list[ReplicaCommand], list[str]]:
    """One `<engine> run` per pod, each with the teardown that removes its container.

    `extra_env` (run_local's --container-env) is added to every container after the pod's own
    environment: a local addition, e.g. a trainer test hook, never something a pod would get."""
    commands: list[ReplicaCommand] = []
    notices: list[str] = []
    api = api_of_job(job)
    master_address = api.master_address(job)
    for role in api.pods(job, runtime):
        pod, template, container = role.name, role.template, role.container
        env, skipped = replica_env(job, role, namespace=namespace, master_port=master_port)
        notices += skipped
        name = container_name(pod, run)
        argv = [
            *engine.argv,
            "run",
            "--rm",
            "--name",
            name,
            "--label",
            f"{LABEL_PREFIX}.run={run}",
            "--label",
            f"{LABEL_PREFIX}.pod={pod}",
            "--network",
            "host",
            "--add-host",
            f"{master_address}:{LOOPBACK}",
            "--shm-size",
            _shm_size(template),
            "--stop-timeout",
            str(int(template["spec"].get("terminationGracePeriodSeconds", 30))),
            # The supervisor's per-replica tag (set in the engine's own environment) goes in too.
            "--env",
            REPLICA_TAG,
        ]
        for key, value in {**env, **(extra_env or {})}.items():
            argv += ["--env", f"{key}={value}"]
        for mount_path in claim_mount_paths(template, container):
            argv += ["--volume", f"{checkpoint_root}:{mount_path}"]
        if "workingDir" in container:
            argv += ["--workdir", container["workingDir"]]
        command = list(container.get("command", []))
        if command:
            argv += ["--entrypoint", command[0]]
        argv += [image, *command[1:], *container.get("args", [])]
        commands.append(
            ReplicaCommand(
                name=pod,
                argv=argv,
                env={},  # filled in by the caller: the engine's own environment
                cwd=workdir,
                restart_policy=role.restart_policy,
                teardown=[*engine.argv, "rm", "--force", name],
            )
        )
    return commands, notices


def parse_env_assignment(text: str) -> tuple[str, str]:
    """`NAME=VALUE` from --container-env; the error names the flag and what is allowed."""
    name, sep, value = text.partition("=")
    if not sep or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is None:
        raise ContainerBackendError(
            f"--container-env = {text!r}: expected NAME=VALUE with NAME a variable name "
            "(letters, digits, underscores; not starting with a digit)"
        )
    return name, value


def image_exists(engine: Engine, image: str, env: Mapping[str, str]) -> bool:
    result = subprocess.run(
        [*engine.argv, "image", "inspect", image],
        env=dict(env),
        capture_output=True,
        check=False,
        timeout=120,
    )
    return result.returncode == 0


def engine_environment(host_env: Mapping[str, str], repo_root: Path) -> dict[str, str]:
    """The engine's environment: the host's, with this project's podman configuration unless the
    caller chose another (CONTAINERS_CONF / CONTAINERS_REGISTRIES_CONF already set)."""
    env = dict(host_env)
    env.setdefault("CONTAINERS_CONF", str(repo_root / DEFAULTS["CONTAINERS_CONF_FILE"]))
    env.setdefault(
        "CONTAINERS_REGISTRIES_CONF", str(repo_root / DEFAULTS["CONTAINERS_REGISTRIES_CONF_FILE"])
    )
    return env


def container_names(commands: Sequence[ReplicaCommand]) -> dict[str, str]:
    """Pod name -> container name, read back from each command line."""
    names = {}
    for command in commands:
        argv = list(command.argv)
        names[command.name] = argv[argv.index("--name") + 1]
    return names
