"""The environment the Kubeflow training operator injects into each PyTorchJob pod.

Pure functions over the PyTorchJob dict, so a local run sees exactly what a pod on the cluster
would see. The rules follow training-operator v1.9 (`pkg/controller.v1/pytorch/envvar.go`,
`master.go`, `elastic.go`), applied to the job after the API defaulter
(`pkg/apis/kubeflow.org/v1/pytorch_defaults.go`) has filled it in:

* defaults: replicas 1; a port named `pytorchjob-port` (23456) on the `pytorch` container;
  spec.nprocPerNode "auto" unless elasticPolicy.nProcPerNode is set; elasticPolicy's
  minReplicas/maxReplicas from each other, or both from the Worker replicas;
* every container gets PYTHONUNBUFFERED="1";
* when the job has a Master replica spec: MASTER_ADDR and PET_MASTER_ADDR are the master's
  service name `<job>-master-0`; MASTER_PORT and PET_MASTER_PORT the Master's `pytorchjob-port`;
  WORLD_SIZE = (sum of all replicas) * nprocPerNode (1 when it is not an integer, e.g. "auto");
  RANK and PET_NODE_RANK = the replica index for the master, index + 1 for workers;
* whenever spec.nprocPerNode is set (after defaulting): PET_NPROC_PER_NODE, verbatim, with or
  without a Master;
* with an elasticPolicy: PET_RDZV_ENDPOINT = (rdzvHost or `<job>-worker-0`):(rdzvPort or the
  Worker's `pytorchjob-port`), PET_RDZV_BACKEND (rdzvBackend or "c10d"), PET_NNODES =
  "minReplicas:maxReplicas", and when set PET_MAX_RESTARTS, PET_NPROC_PER_NODE (the deprecated
  elasticPolicy.nProcPerNode), PET_RDZV_ID, PET_RDZV_CONF ("k=v,k=v") and PET_STANDALONE ("");
  without one, PET_NNODES = the sum of all replicas.

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
DEFAULT_RDZV_BACKEND = "c10d"


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


def _elastic(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    policy = job.get("spec", {}).get("elasticPolicy")
    if policy is not None and not isinstance(policy, Mapping):
        raise OperatorEnvError("spec.elasticPolicy must be a mapping")
    return policy


def nproc_per_node(job: Mapping[str, Any]) -> str | None:
    """spec.nprocPerNode after the defaulter: "auto" unless the job sets it or sets the
    deprecated elasticPolicy.nProcPerNode (then the operator leaves it unset)."""
    value = job.get("spec", {}).get("nprocPerNode")
    if value is not None:
        return str(value)
    elastic = _elastic(job)
    if elastic is not None and elastic.get("nProcPerNode") is not None:
        return None
    return DEFAULT_NPROC_PER_NODE


def _nproc_per_node_int(job: Mapping[str, Any]) -> int:
    try:
        return int(nproc_per_node(job) or "")
    except ValueError:
        return 1  # "auto"/"cpu"/"gpu"/unset: torchrun decides, the operator counts one per pod


def training_container(template: Mapping[str, Any], replica_type: str) -> Mapping[str, Any]:
    """The pod template's `pytorch` container: the one the operator injects its environment
    into and takes the rendezvous port from."""
    for container in template.get("spec", {}).get("containers", []) or []:
        if container.get("name") == DEFAULT_CONTAINER_NAME:
            return container
    raise OperatorEnvError(
        f"the {replica_type} replica has no container named {DEFAULT_CONTAINER_NAME!r}; "
        "the operator injects its environment into that one and takes the rendezvous port from it"
    )


def replica_port(job: Mapping[str, Any], replica_type: str) -> int:
    """The `pytorchjob-port` of a replica's `pytorch` container (defaulted to 23456)."""
    spec = replica_specs(job).get(replica_type)
    if spec is None:
        raise OperatorEnvError(f"the job has no {replica_type} replica spec")
    container = training_container(spec.get("template", {}), replica_type)
    for port in container.get("ports", []) or []:
        if port.get("name") == DEFAULT_PORT_NAME:
            return int(port["containerPort"])
    return DEFAULT_PORT


def master_port(job: Mapping[str, Any]) -> int:
    return replica_port(job, MASTER)


def _elastic_env(job: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, str]:
    specs = replica_specs(job)
    if WORKER not in specs:
        raise OperatorEnvError("an elasticPolicy needs a Worker replica spec (the operator's rule)")
    if policy.get("nProcPerNode") is not None and job["spec"].get("nprocPerNode") is not None:
        raise OperatorEnvError(
            "spec.elasticPolicy.nProcPerNode must not be used with spec.nprocPerNode"
        )
    host = policy.get("rdzvHost") or pod_name(job["metadata"]["name"], WORKER, 0)
    port = policy.get("rdzvPort")
    port = int(port) if port is not None else replica_port(job, WORKER)
    minimum, maximum = policy.get("minReplicas"), policy.get("maxReplicas")
    if minimum is None and maximum is None:
        minimum = maximum = replica_count(specs[WORKER])
    minimum = maximum if minimum is None else minimum
    maximum = minimum if maximum is None else maximum
    env = {
        "PET_RDZV_ENDPOINT": f"{host}:{port}",
        "PET_RDZV_BACKEND": str(policy.get("rdzvBackend") or DEFAULT_RDZV_BACKEND),
        "PET_NNODES": f"{int(minimum)}:{int(maximum)}",
    }
    if policy.get("maxRestarts") is not None:
        env["PET_MAX_RESTARTS"] = str(int(policy["maxRestarts"]))
    if policy.get("nProcPerNode") is not None:
        env["PET_NPROC_PER_NODE"] = str(int(policy["nProcPerNode"]))
    if policy.get("rdzvId") is not None:
        env["PET_RDZV_ID"] = str(policy["rdzvId"])
    if policy.get("rdzvConf"):
        pairs = [f"{item.get('key', '')}={item.get('value', '')}" for item in policy["rdzvConf"]]
        env["PET_RDZV_CONF"] = ",".join(pairs)
    if policy.get("standalone") is True:
        env["PET_STANDALONE"] = ""
    return env


def injected_env(job: Mapping[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """What the operator adds to the containers of `<replica_type>` pod `index`."""
    specs = replica_specs(job)
    if replica_type not in specs:
        raise OperatorEnvError(f"the job has no {replica_type!r} replica spec")
    if not 0 <= index < replica_count(specs[replica_type]):
        raise OperatorEnvError(
            f"{replica_type} index {index} is outside 0..{replica_count(specs[replica_type]) - 1}"
        )
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
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
                "PET_NODE_RANK": str(rank),
            }
        )
    nproc = nproc_per_node(job)
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = nproc
    policy = _elastic(job)
    if policy is not None:
        env.update(_elastic_env(job, policy))
    else:
        env["PET_NNODES"] = str(replicas)
    return env


def is_elastic(job: Mapping[str, Any]) -> bool:
    return _elastic(job) is not None


def master_role(job: Mapping[str, Any]) -> str:
    """The replica type whose pod index 0 the operator treats as the master (`IsMasterRole`):
    the Master, or the first Worker of a job without one (an elastic job)."""
    return MASTER if MASTER in replica_specs(job) else WORKER


def master_role_pod(job: Mapping[str, Any]) -> str:
    return pod_name(job["metadata"]["name"], master_role(job), 0)


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
