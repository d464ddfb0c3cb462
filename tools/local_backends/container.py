"""Each pod of a job (PyTorchJob or TrainJob) as a container of the training image
(`--backend container`).

What a pod gets on the cluster, given to a container here:

* the image's entrypoint replaced by the container's `command`, its CMD by `args`, its working
  directory by `workingDir` (Kubernetes semantics);
* the container's own env, then what the job's controller injects (the job API's `pods`), the
  controller's entries winning, and HOSTNAME = the pod name;
* the checkpoint claim's `mountPath` bound to the local checkpoint root, each `job.volumes`
  claim's to its local directory (read-only where the pod mounts it so), a memory-backed
  /dev/shm as large as its emptyDir's sizeLimit (or `DEFAULT_SHM_SIZE`);
* the pod's user and groups (`--user runAsUser:runAsGroup`, `--group-add fsGroup`) and its
  container's restrictions (`allowPrivilegeEscalation: false` as `no-new-privileges`, dropped
  capabilities as `--cap-drop`), and the checkpoint root given to the pod's fsGroup first, as the
  kubelet gives it the claim (`give_to_fs_group`), so the image's non-root user can write it;
  under rootless podman the pod's user is this user instead (`--userns keep-id`), which owns the
  root already;
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

import dataclasses
import os
import re
import shutil
import stat
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders.job_apis import api_of_job
from machine.containers import DEFAULT_IMAGE, engine_environment
from machine.ports import LOOPBACK
from settings.stack import StackSettings
from tools.local_backends import ReplicaPlan, pods
from tools.supervisor import REPLICA_TAG, ReplicaCommand

ENGINES = ("podman", "docker")
DEFAULT_SHM_SIZE = "1g"
LABEL_PREFIX = "pytorch-distributed.run-local"


def stack_image(stack: str, settings: StackSettings) -> str:
    """The local image of a stack, which `make image STACK=...` (scripts/build-image.sh) builds
    and `--backend container` runs by default: the trainer image, or for a stack built from a
    context of its own, `localhost/pytorch-distributed-<stack>:local`."""
    if settings.image.trainer_context:
        return DEFAULT_IMAGE
    return f"localhost/pytorch-distributed-{stack.lower()}:local"


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

    @property
    def rootless(self) -> bool:
        """podman run by a user other than root: the containers' ids are that user's
        subordinate ones, but for the one `--userns keep-id` maps to the user."""
        return self.name == "podman" and os.geteuid() != 0


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


def identity_options(
    template: Mapping[str, Any], container: Mapping[str, Any], *, rootless: bool = False
) -> list[str]:
    """The engine's options for what the kubelet makes of the pod's and the container's
    securityContext: the user and groups, no new privileges, the dropped capabilities. Rootless,
    the pod's user and group are this user's own ids (`keep-id`), so the checkpoint root, this
    user's, is theirs in the container and what they write is this user's."""
    pod = template["spec"].get("securityContext") or {}
    own = container.get("securityContext") or {}
    options: list[str] = []
    user = own.get("runAsUser", pod.get("runAsUser"))
    group = own.get("runAsGroup", pod.get("runAsGroup"))
    if user is not None and rootless:
        mapped = f"uid={user}" + (f",gid={group}" if group is not None else "")
        options += ["--userns", f"keep-id:{mapped}"]
    if user is not None:
        options += ["--user", f"{user}:{group}" if group is not None else str(user)]
    if pod.get("fsGroup") is not None:
        options += ["--group-add", str(pod["fsGroup"])]
    if own.get("allowPrivilegeEscalation") is False:
        options += ["--security-opt", "no-new-privileges"]
    for capability in (own.get("capabilities") or {}).get("drop") or []:
        options += ["--cap-drop", str(capability)]
    return options


def fs_group(job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> int | None:
    """The fsGroup of the job's pods (one securityContext for all of them), if they have one."""
    for role in api_of_job(job).pods(job, runtime):
        group = (role.template["spec"].get("securityContext") or {}).get("fsGroup")
        if group is not None:
            return int(group)
    return None


def give_to_fs_group(directory: Path, group: int) -> None:
    """What the kubelet does to a pod's volume for its fsGroup with `OnRootMismatch`
    (pkg/volume/volume_linux.go): unless the directory already belongs to `group` with mode
    rwxrwx and setgid, everything in it becomes the group's, files gain rw-rw- and directories
    rwxrwx and setgid (what is made in them is the group's too). ContainerBackendError, one
    line, when this user may not change it."""
    files, directories = 0o660, 0o2770

    def settled(path: Path) -> bool:
        status = path.stat()
        return status.st_gid == group and status.st_mode & directories == directories

    if settled(directory):
        return
    try:
        for path in [directory, *directory.rglob("*")]:
            if path.is_symlink():
                continue
            os.chown(path, -1, group)
            extra = directories if path.is_dir() else files
            path.chmod(stat.S_IMODE(path.stat().st_mode) | extra)
    except PermissionError as error:
        raise ContainerBackendError(
            f"--checkpoint-root = '{directory}': the pods' fsGroup {group} "
            f"(job.securityContext.fsGroup) must own it, as the kubelet makes it own a claim, "
            f"and this user may not give it ({error.strerror}: {error.filename}); run as root, "
            f"or first: chgrp -R {group} '{directory}' && chmod -R g+rwX '{directory}'"
        ) from None


def replica_commands(
    job: Mapping[str, Any],
    plan: ReplicaPlan,
    *,
    engine: Engine,
    image: str,
    run: str,
    workdir: Path,
    extra_env: Mapping[str, str] | None = None,
) -> tuple[list[ReplicaCommand], list[str]]:
    """One `<engine> run` per pod, each with the teardown that removes its container.

    `extra_env` (run_local's --container-env) is added to every container after the pod's own
    environment: a local addition, e.g. a trainer test hook, never something a pod would get.
    A variable from a Secret (`job.secretEnv`) is passed by name only (`--env NAME`): the engine
    gives the container its own environment's value, which never appears on a command line.
    Each claim is bound to its local directory (the plan's `data_dirs`, else the checkpoint
    root), read-only where the pod mounts it so."""
    namespace, checkpoint_root, master_port = plan.namespace, plan.checkpoint_root, plan.master_port
    runtime, data_dirs = plan.runtime, plan.data_dirs
    commands: list[ReplicaCommand] = []
    notices: list[str] = []
    api = api_of_job(job)
    master_address = api.master_address(job)
    for role in api.pods(job, runtime):
        pod, template, container = role.name, role.template, role.container
        env, skipped = pods.replica_env(job, role, namespace=namespace, master_port=master_port)
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
            *identity_options(template, container, rootless=engine.rootless),
        ]
        secrets = set(pods.secret_names(container))
        for key, value in {**env, **(extra_env or {})}.items():
            argv += ["--env", key if key in secrets else f"{key}={value}"]
        for mount in pods.claim_mounts(template, container, checkpoint_root, data_dirs):
            suffix = ":ro" if mount.read_only else ""
            argv += ["--volume", f"{mount.local}:{mount.mount_path}{suffix}"]
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


def container_names(commands: Sequence[ReplicaCommand]) -> dict[str, str]:
    """Pod name -> container name, read back from each command line."""
    names = {}
    for command in commands:
        argv = list(command.argv)
        names[command.name] = argv[argv.index("--name") + 1]
    return names


def cpu_only(settings: StackSettings) -> tuple[StackSettings, str | None]:
    """The container backend runs every replica on the CPU (no GPU passthrough here)."""
    job = settings.job
    if job.gpus_per_node == 0:
        return settings, None
    notice = (
        f"NOTICE: the stack asks for {job.gpus_per_node} GPU(s) per replica; the container "
        "backend runs on the CPU (gloo backend, one process per replica)."
    )
    return dataclasses.replace(settings, job=dataclasses.replace(job, gpus_per_node=0)), notice


class ContainerBackend:
    """Each pod a container of the training image, on the host's network (see the module
    docstring); every replica runs on the CPU."""

    runs_as = "containers"

    def __init__(
        self,
        *,
        image: str,
        engine: str | None,
        container_runtime: str | None,
        extra_env: Mapping[str, str],
        repo_root: Path,
    ) -> None:
        self.image = image
        self._engine_name, self._runtime = engine, container_runtime
        self._extra_env, self._repo_root = extra_env, repo_root

    def fit_to_machine(self, settings: StackSettings) -> tuple[StackSettings, str | None]:
        return cpu_only(settings)

    def check_job(self, job: Mapping[str, Any]) -> None:
        if api_of_job(job).is_elastic(job):
            raise ContainerBackendError(
                "job.elastic: --backend container runs jobs of a fixed size only; run an "
                "elastic stack with --backend process (its agents re-form the group on loopback)"
            )

    def replica_commands(
        self, job: Mapping[str, Any], plan: ReplicaPlan
    ) -> tuple[list[ReplicaCommand], list[str]]:
        """The replicas as containers of the image, run by the engine with the host's
        environment plus this project's podman configuration."""
        engine = resolve_engine(self._engine_name, self._runtime)
        engine_env = engine_environment(pods.host_environment(), self._repo_root)
        if not image_exists(engine, self.image, engine_env):
            raise ContainerBackendError(
                f"--image = {self.image!r}: {engine.name} has no such image; build it with "
                "`make image STACK=<stack>` (scripts/build-image.sh) or pass the reference of "
                "one you built"
            )
        commands, notices = replica_commands(
            job,
            plan,
            engine=engine,
            image=self.image,
            run=run_id(),
            workdir=self._repo_root,
            extra_env=self._extra_env,
        )
        return [dataclasses.replace(c, env=engine_env) for c in commands], notices

    def rendezvous(self, job: Mapping[str, Any], master_port: int) -> str:
        api = api_of_job(job)
        address = api.master_address(job)
        return (
            f"rendezvous {address}:{master_port} (the containers share the host's network; "
            f"{address} is {LOOPBACK}, the port a free one instead of "
            f"{api.master_port(job)}), image {self.image}"
        )

    def prepare(
        self, job: Mapping[str, Any], checkpoint_root: Path, runtime: Mapping[str, Any] | None
    ) -> None:
        """The checkpoint root given to the pods' fsGroup, as the kubelet gives them the claim
        (rootless, it is the pods' user's own already: see `identity_options`)."""
        group = fs_group(job, runtime)
        if group is not None and not resolve_engine(self._engine_name, self._runtime).rootless:
            give_to_fs_group(checkpoint_root, group)

    def record(self, commands: Sequence[ReplicaCommand], pid_dir: Path) -> None:
        """`<pod>.container`: the name of the pod's container, so a test or a user can kill it."""
        pid_dir.mkdir(parents=True, exist_ok=True)
        for pod, name in container_names(commands).items():
            (pid_dir / f"{pod}.container").write_text(f"{name}\n")
