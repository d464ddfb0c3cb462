"""The process backend: each pod of the job a local process tree (entrypoint.sh, then torchrun,
or a `job.command` of your own), the image's paths mapped to this checkout and each claim to its
local directory (the checkpoint claim to the local checkpoint root), the rendezvous on loopback
(see tools/run_local.py's docstring for every deviation from a cluster).

Your own image's code is `image.context` on disk, which its Dockerfile copies to the image's
code directory (APP_DIR, /opt/pytorch-distributed, as the example's does): paths there map to
it, a container without a workingDir (a `job.command` starts in the image's WORKDIR) runs in
it, and it is first on PYTHONPATH (a `job.task` of your own package, beside the trainer).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from builders.job_apis import api_of_job
from machine.ports import LOOPBACK
from settings.stack import TRAINER_CONTEXT, StackSettings
from settings.values import APP_DIR
from tools.local_backends import ReplicaPlan, pods
from tools.local_backends.pods import host_environment
from tools.supervisor import ReplicaCommand

LOCAL_MASTER_ADDR = LOOPBACK


def choose_devices(settings: StackSettings) -> tuple[StackSettings, list[str], str | None]:
    """GPUs only when there are enough for every replica: (settings, per-replica
    CUDA_VISIBLE_DEVICES, notice)."""
    job = settings.job
    if job.gpus_per_node == 0:
        return settings, [""] * job.nodes, None
    import torch  # only paid for when the stack asks for GPUs

    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    needed = job.gpus_per_node * job.nodes
    if available >= needed:
        per = job.gpus_per_node
        slices = [",".join(str(d) for d in range(r * per, (r + 1) * per)) for r in range(job.nodes)]
        return settings, slices, None
    notice = (
        f"NOTICE: the stack asks for {job.gpus_per_node} GPU(s) on each of {job.nodes} replicas "
        f"({needed} in all) but this machine has {available}; running on the CPU instead "
        "(gloo backend, one process per replica)."
    )
    cpu_job = dataclasses.replace(job, gpus_per_node=0)
    return dataclasses.replace(settings, job=cpu_job), [""] * job.nodes, notice


class PathMapper:
    """Container paths to local ones: the image's APP_DIR is this checkout, each claim mount
    is the local checkpoint root."""

    def __init__(self, mounts: Mapping[str, Path]) -> None:
        # Longest prefix first, so nested mounts resolve to the most specific one.
        self._mounts = sorted(mounts.items(), key=lambda item: len(item[0]), reverse=True)

    def __call__(self, value: str) -> str:
        for prefix, local in self._mounts:
            if value == prefix or value.startswith(prefix + "/"):
                return str(local) + value[len(prefix) :]
        return value


def path_mapper(
    template: Mapping[str, Any],
    container: Mapping[str, Any],
    checkpoint_root: Path,
    repo_root: Path,
    data_dirs: Mapping[str, Path] | None = None,
    code_dir: Path | None = None,
) -> PathMapper:
    """The image's code directory is this checkout (the trainer's image: `trainer/` at
    APP_DIR/trainer) or your own image's `code_dir`, whose Dockerfile puts it there (and, an
    image built on the trainer's, the trainer at APP_DIR/trainer); each claim its directory."""
    mounts: dict[str, Path] = {APP_DIR: code_dir or repo_root}
    mounts[f"{APP_DIR}/{TRAINER_CONTEXT}"] = repo_root / TRAINER_CONTEXT
    for mount in pods.claim_mounts(template, container, checkpoint_root, data_dirs):
        mounts[mount.mount_path] = mount.local
    return PathMapper(mounts)


def elastic_local_env(env: Mapping[str, str], hosts: bool) -> dict[str, str]:
    """An elastic pod's rendezvous on loopback: the store on worker-0's agent (`hosts`), the
    peers' address 127.0.0.1 (see the module docstring)."""
    conf = ",".join(filter(None, [env.get("PET_RDZV_CONF"), f"is_host={int(hosts)}"]))
    return {**env, "PET_RDZV_CONF": conf, "PET_LOCAL_ADDR": LOCAL_MASTER_ADDR}


def replica_commands(
    job: Mapping[str, Any],
    plan: ReplicaPlan,
    *,
    repo_root: Path,
    visible_devices: Sequence[str],
    code_dir: Path | None = None,
) -> tuple[list[ReplicaCommand], list[str]]:
    """One local process tree per pod of the job (`code_dir`: the image's code on disk when it
    is not the trainer's, `image.context`)."""
    namespace, checkpoint_root, master_port = plan.namespace, plan.checkpoint_root, plan.master_port
    runtime, data_dirs = plan.runtime, plan.data_dirs
    api = api_of_job(job)
    elastic = api.is_elastic(job)
    commands: list[ReplicaCommand] = []
    notices: list[str] = []
    base = host_environment()
    if code_dir is not None:
        base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code_dir), base.get("PYTHONPATH")]))
    for slot, role in enumerate(api.pods(job, runtime)):
        pod, template, container = role.name, role.template, role.container
        mapper = path_mapper(template, container, checkpoint_root, repo_root, data_dirs, code_dir)
        pod_env, skipped = pods.replica_env(
            job,
            role,
            namespace=namespace,
            master_port=master_port,
            master_addr=LOCAL_MASTER_ADDR,
            map_value=mapper,
        )
        notices += skipped
        if elastic:
            pod_env = elastic_local_env(pod_env, hosts=slot == 0)
        env = {**base, "CUDA_VISIBLE_DEVICES": visible_devices[slot], **pod_env}
        argv = [mapper(part) for part in [*container["command"], *container.get("args", [])]]
        # No workingDir: the image's WORKDIR, where your own image keeps its code.
        working_dir = container.get("workingDir")
        cwd = Path(mapper(working_dir)) if working_dir else (code_dir or repo_root)
        commands.append(
            ReplicaCommand(
                name=pod, argv=argv, env=env, cwd=cwd, restart_policy=role.restart_policy
            )
        )
    return commands, notices


class ProcessBackend:
    """Each pod a local process tree of this checkout (see the module docstring)."""

    runs_as = "local processes"
    image = "local"  # what the job manifest names; nothing pulls it

    def __init__(self, repo_root: Path, code_dir: Path | None = None) -> None:
        """`code_dir`: the directory your own image is built from (`image.context`), when the
        stack's image is not the trainer's."""
        self._repo_root = repo_root
        self._code_dir = code_dir
        self._visible_devices: list[str] = []

    def fit_to_machine(self, settings: StackSettings) -> tuple[StackSettings, str | None]:
        settings, self._visible_devices, notice = choose_devices(settings)
        return settings, notice

    def check_job(self, job: Mapping[str, Any]) -> None:
        """Every job the builders make runs as processes, elastic ones included."""

    def replica_commands(
        self, job: Mapping[str, Any], plan: ReplicaPlan
    ) -> tuple[list[ReplicaCommand], list[str]]:
        return replica_commands(
            job,
            plan,
            repo_root=self._repo_root,
            visible_devices=self._visible_devices,
            code_dir=self._code_dir,
        )

    def rendezvous(self, job: Mapping[str, Any], master_port: int) -> str:
        api = api_of_job(job)
        if api.is_elastic(job):
            policy = job["spec"]["elasticPolicy"]
            master = api.pods(job)[0].name
            return (
                f"{policy['rdzvBackend']} rendezvous {LOCAL_MASTER_ADDR}:{master_port} on "
                f"{master}'s agent (local stand-in for {master}:{api.master_port(job)}), elastic "
                f"between {policy['minReplicas']} and {policy['maxReplicas']} nodes"
            )
        return (
            f"rendezvous {LOCAL_MASTER_ADDR}:{master_port} (local stand-in for "
            f"{api.master_address(job)}:{api.master_port(job)})"
        )

    def prepare(
        self, job: Mapping[str, Any], checkpoint_root: Path, runtime: Mapping[str, Any] | None
    ) -> None:
        """Nothing: the processes run as this user, who may write the root (preflight checked)."""

    def record(self, commands: Sequence[ReplicaCommand], pid_dir: Path) -> None:
        """Nothing beyond the supervisor's own `<pod>.pid` files."""
