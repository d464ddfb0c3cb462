"""The environment the Kubeflow training operator injects into each PyTorchJob pod.

Pure functions over the PyTorchJob dict, so a local run sees exactly what a pod on the cluster
would see. The rules follow training-operator v1.8 (`pkg/controller.v1/pytorch/envvar.go`,
`master.go`):

* every container gets PYTHONUNBUFFERED="0" (any non-empty value makes Python unbuffered);
* when the job has a Master replica spec: MASTER_ADDR and PET_MASTER_ADDR are the master's
  service name `<job>-master-0`; MASTER_PORT and PET_MASTER_PORT are the `containerPort` of the
  port named `pytorchjob-port` on the Master's `pytorch` container (the operator errors when it
  is missing; the API defaulter adds 23456 when no such port exists, so we do the same);
  WORLD_SIZE = (sum of all replicas) * nprocPerNode (1 when nprocPerNode is not an integer, e.g.
  "auto"); RANK and PET_NODE_RANK = the replica index for the master, index + 1 for workers;
  PET_NPROC_PER_NODE = spec.nprocPerNode verbatim (defaulted to "auto");
* without an elasticPolicy, PET_NNODES = the sum of all replicas.

The operator appends these after the container's own env; Kubernetes lets the last entry of a
duplicated name win, so `pod_environment` layers them in that order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MASTER = "Master"
WORKER = "Worker"
DEFAULT_CONTAINER_NAME = "pytorch"
DEFAULT_PORT_NAME = "pytorchjob-port"
DEFAULT_PORT = 23456
DEFAULT_NPROC_PER_NODE = "auto"


class OperatorEnvError(ValueError):
    """The job dict is something the operator would reject or we cannot interpret."""


def replica_specs(job: Mapping[str, Any]) -> Mapping[str, Any]:
    specs = job.get("spec", {}).get("pytorchReplicaSpecs")
    if not isinstance(specs, Mapping) or not specs:
        raise OperatorEnvError("spec.pytorchReplicaSpecs is missing or empty")
    return specs


def replica_count(spec: Mapping[str, Any]) -> int:
    # The API defaulter sets replicas to 1 when absent.
    return int(spec.get("replicas", 1))


def total_replicas(job: Mapping[str, Any]) -> int:
    return sum(replica_count(spec) for spec in replica_specs(job).values())


def pod_name(job_name: str, replica_type: str, index: int) -> str:
    """The operator's pod and service name for one replica (`genGeneralName`)."""
    return f"{job_name}-{replica_type.lower()}-{index}".replace("/", "-")


def nproc_per_node(job: Mapping[str, Any]) -> str:
    value = job.get("spec", {}).get("nprocPerNode")
    return DEFAULT_NPROC_PER_NODE if value is None else str(value)


def _nproc_per_node_int(job: Mapping[str, Any]) -> int:
    try:
        return int(nproc_per_node(job))
    except ValueError:
        return 1  # "auto"/"cpu"/"gpu": torchrun decides, the operator counts one per pod


def master_port(job: Mapping[str, Any]) -> int:
    master = replica_specs(job).get(MASTER)
    if master is None:
        raise OperatorEnvError("the job has no Master replica spec")
    containers = master.get("template", {}).get("spec", {}).get("containers", [])
    for container in containers:
        if container.get("name") != DEFAULT_CONTAINER_NAME:
            continue
        for port in container.get("ports", []) or []:
            if port.get("name") == DEFAULT_PORT_NAME:
                return int(port["containerPort"])
        return DEFAULT_PORT
    raise OperatorEnvError(
        f"the Master replica has no container named {DEFAULT_CONTAINER_NAME!r}; "
        "the operator needs it to find the rendezvous port"
    )


def injected_env(job: Mapping[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """What the operator adds to the `pytorch` container of `<replica_type>` pod `index`."""
    specs = replica_specs(job)
    if replica_type not in specs:
        raise OperatorEnvError(f"the job has no {replica_type!r} replica spec")
    if not 0 <= index < replica_count(specs[replica_type]):
        raise OperatorEnvError(
            f"{replica_type} index {index} is outside 0..{replica_count(specs[replica_type]) - 1}"
        )
    env: dict[str, str] = {"PYTHONUNBUFFERED": "0"}
    replicas = total_replicas(job)
    if MASTER in specs:
        address = pod_name(job["metadata"]["name"], MASTER, 0)
        port = str(master_port(job))
        rank = index + 1 if replica_type == WORKER else index
        env.update(
            {
                "MASTER_PORT": port,
                "PET_MASTER_PORT": port,
                "MASTER_ADDR": address,
                "PET_MASTER_ADDR": address,
                "WORLD_SIZE": str(replicas * _nproc_per_node_int(job)),
                "RANK": str(rank),
                "PET_NPROC_PER_NODE": nproc_per_node(job),
                "PET_NODE_RANK": str(rank),
            }
        )
    if job.get("spec", {}).get("elasticPolicy") is None:
        env["PET_NNODES"] = str(replicas)
    return env


def replica_pods(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Every (replica type, index) the operator creates a pod for: the master first."""
    specs = replica_specs(job)
    order = [MASTER, WORKER, *sorted(set(specs) - {MASTER, WORKER})]
    return [
        (rtype, index)
        for rtype in order
        if rtype in specs
        for index in range(replica_count(specs[rtype]))
    ]
