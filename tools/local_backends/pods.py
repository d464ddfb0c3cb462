"""A pod of the job's manifest, read the way a kubelet would start it: what both local backends
share, so a process and a container of the same pod get the same environment and the same claim
mounts (the container backend's own paths, the process backend's mapped to this checkout)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders.job_apis import PodRole, api_of_job
from machine.ports import free_port
from settings.values import METRICS_PORT_ENV

_FIELD_REFS = ("metadata.name", "metadata.namespace")
# The host's own launcher variables would leak into the replicas and confuse torchrun.
_HOST_DISTRIBUTED_VARS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
)
_HOST_DISTRIBUTED_PREFIXES = ("PET_", "TORCHELASTIC_")


def host_environment() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _HOST_DISTRIBUTED_VARS and not key.startswith(_HOST_DISTRIBUTED_PREFIXES)
    }
    # entrypoint.sh runs `torchrun`: the one next to this interpreter (the project's venv).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@dataclass(frozen=True)
class ClaimMount:
    """A persistent volume claim the container mounts, and the local directory standing in for
    it: the checkpoint root, or a `job.volumes` claim's own directory."""

    mount_path: str
    local: Path
    read_only: bool


def claim_mounts(
    template: Mapping[str, Any],
    container: Mapping[str, Any],
    checkpoint_root: Path,
    data_dirs: Mapping[str, Path] | None = None,
) -> list[ClaimMount]:
    """Where ``container`` mounts the pod's persistent volume claims and what backs each here:
    a claim of ``data_dirs`` (claim name -> directory) its directory, any other the checkpoint
    root."""
    claims = {
        volume["name"]: volume["persistentVolumeClaim"]
        for volume in template["spec"].get("volumes", [])
        if "persistentVolumeClaim" in volume
    }
    mounts = []
    for mount in container.get("volumeMounts", []):
        claim = claims.get(mount["name"])
        if claim is None:
            continue
        local = (data_dirs or {}).get(claim["claimName"], checkpoint_root)
        read_only = bool(mount.get("readOnly") or claim.get("readOnly"))
        mounts.append(ClaimMount(mount["mountPath"], local, read_only))
    return mounts


def secret_names(container: Mapping[str, Any]) -> list[str]:
    """The container's variables that come from a Secret (`job.secretEnv`)."""
    return [
        entry["name"]
        for entry in container.get("env", [])
        if "secretKeyRef" in (entry.get("valueFrom") or {})
    ]


def container_env(
    container: Mapping[str, Any],
    *,
    pod: str,
    namespace: str,
    map_value: Callable[[str], str] = str,
    secrets: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """The container's own env as the kubelet resolves it (values, and the downward API's pod
    name and namespace), each value passed through ``map_value``; notices for what is skipped.
    A variable from a Secret (`job.secretEnv`, whose value only the cluster holds) takes the
    value of the same name in ``secrets`` (this user's environment), if it has one.
    One home for both backends: the process backend maps paths to the host's, containers don't."""
    env: dict[str, str] = {}
    notices: list[str] = []
    fields = dict(zip(_FIELD_REFS, (pod, namespace), strict=True))
    for entry in container.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = map_value(str(entry["value"]))
            continue
        source = entry.get("valueFrom") or {}
        field_path = source.get("fieldRef", {}).get("fieldPath")
        if field_path in fields:
            env[name] = fields[field_path]
        elif "secretKeyRef" in source:
            if name in (secrets or {}):
                env[name] = (secrets or {})[name]
            else:
                secret = source["secretKeyRef"].get("name")
                notices.append(
                    f"env {name} comes from Secret {secret} (job.secretEnv), which only the "
                    f"cluster holds: not set locally; export {name} to give it to the replicas"
                )
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
    not resolve to it). Every replica shares this machine's network, so each gets a free port
    of its own for its metrics (``METRICS_PORT``, with ``metrics.enabled``), and a notice says
    where to scrape it."""
    api = api_of_job(job)
    pod = role.name
    own, notices = container_env(
        role.container,
        pod=pod,
        namespace=namespace,
        map_value=map_value,
        secrets=host_environment(),
    )
    if METRICS_PORT_ENV in own:
        port = free_port()
        notices.append(
            f"{pod}: metrics.port {own[METRICS_PORT_ENV]} is one port of this machine, not "
            f"one per pod: {METRICS_PORT_ENV}={port} (http://127.0.0.1:{port}/metrics)"
        )
        own[METRICS_PORT_ENV] = str(port)
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
