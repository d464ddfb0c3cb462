"""PyTorchJob (kubeflow.org/v1, the Kubeflow training operator v1.9): its builder, its pods
and the environment the operator injects into them, and how to find it on the cluster.

Facts about the Kubeflow training operator (kubeflow.org/v1) this module relies on:
- its admission webhook accepts only the replica types Master and Worker, needs a container named
  `pytorch` in every template, Master `replicas` exactly 1, and a job name that is a DNS-1035 label;
- it injects MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK and the torchrun PET_* variables
  (PET_MASTER_ADDR, PET_MASTER_PORT, PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK) into the
  `pytorch` container, taking the port from the container port named `pytorchjob-port`;
- `spec.nprocPerNode` is a string field (`*string` in PyTorchJobSpec) that becomes
  PET_NPROC_PER_NODE;
- the replica's `restartPolicy` (not the pod template's) decides how the operator restarts pods;
  under `ExitCode` the pods get `restartPolicy: Never`, a pod that exited 128 or more is deleted
  and recreated, one that exited 1-127 fails the job, and `backoffLimit` never applies (it sums
  container restarts, and recreated pods have none);
- it labels pods `training.kubeflow.org/job-name` and `training.kubeflow.org/replica-type`;
- with `spec.elasticPolicy` it needs a Worker replica spec and injects PET_NNODES=min:max,
  PET_RDZV_ENDPOINT=`<job>-worker-0`:<the Worker's port>, PET_RDZV_BACKEND and PET_MAX_RESTARTS
  instead of a fixed node count and rank; an elastic job here is Workers only, as in the
  operator's elastic examples (every pod is a torchrun agent of the c10d rendezvous);
- into every Worker pod of a job with a Master (never into the Master's, nor into an elastic
  job's), it appends an init container `init-pytorch` that loops on `nslookup <job>-master-0`
  (`pkg/controller.v1/pytorch/initcontainer.go`, `setInitContainer`). It is made from a template
  alone: the file `--pytorch-init-container-template-file` names (default
  /etc/config/initContainer.yaml) if it exists, else the operator's built-in one. Nothing of the
  pod template is copied into it, no securityContext either, and the built-in template sets none.
  The pod's own securityContext still covers it (runAsNonRoot, runAsUser and runAsGroup,
  seccompProfile: Pod Security "restricted" accepts them at pod level), but "restricted" also
  wants `allowPrivilegeEscalation: false` and `capabilities.drop: [ALL]` on every container, init
  containers included, and those have no pod-level field: in a namespace that enforces
  "restricted", the API server refuses the Worker pods the operator makes from the built-in
  template (the job's Master runs, and waits for Workers that never come; the operator records a
  FailedCreatePod event on the job with the API server's reason, which `make status` shows). The
  operator needs RESTRICTED_INIT_CONTAINER_TEMPLATE below as its template file
  (docs/explanation/security.md says how); the real-node e2e plane runs it so.

The environment: pure functions over the PyTorchJob dict, so a local run sees exactly what a pod
on the cluster would see. The rules follow training-operator v1.9
(`pkg/controller.v1/pytorch/envvar.go`, `master.go`, `elastic.go`), applied to the job after the
API defaulter (`pkg/apis/kubeflow.org/v1/pytorch_defaults.go`) has filled it in:

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
duplicated name win, so the local runner layers them in that order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from builders.job_apis import JobApi, JobApiError, PodIdentity, PodRole
from builders.manifests import (
    job_annotations,
    metrics_ports,
    object_metadata,
    pod_template,
    queue_labels,
    resource_names,
    scheduling_labels,
)

if TYPE_CHECKING:
    from settings.stack import StackSettings

CONTAINER_NAME = "pytorch"
# The training operator's built-in init container template (v1.9.4, initcontainer.go), with the
# securityContext Pod Security "restricted" wants on every container; its Go template fields are
# the operator's. For `--pytorch-init-container-template-file` (see the module docstring).
RESTRICTED_INIT_CONTAINER_TEMPLATE = """\
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command:
    - sh
    - -c
    - >-
      err=1; for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break;
      fi; echo waiting for master; sleep 2; done; exit $err
  securityContext:
    allowPrivilegeEscalation: false
    capabilities:
      drop: [ALL]
"""
MASTER_PORT = 23456
PORT_NAME = "pytorchjob-port"
# torchrun's rendezvous for elastic jobs: a TCP store on the first node's agent.
RDZV_BACKEND = "c10d"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"


def _pod_template(settings: StackSettings, *, image: Any, replica_type: str) -> dict[str, Any]:
    ports = [
        {"name": PORT_NAME, "containerPort": MASTER_PORT, "protocol": "TCP"},
        *metrics_ports(settings),
    ]
    return pod_template(
        settings, image=image, replica_type=replica_type, container=CONTAINER_NAME, ports=ports
    )


def _replica(settings: StackSettings, *, image: Any, replica_type: str, replicas: int) -> dict:
    return {
        "replicas": replicas,
        "restartPolicy": settings.job.restart_policy,
        "template": _pod_template(settings, image=image, replica_type=replica_type),
    }


def elastic_policy(settings: StackSettings) -> dict[str, Any] | None:
    """`spec.elasticPolicy` of an elastic job: between `minNodes` and all `job.nodes` pods, c10d
    rendezvous, torchrun's restarts; None for a job of fixed size."""
    elastic = settings.job.elastic
    if elastic is None:
        return None
    return {
        "minReplicas": elastic.min_nodes,
        "maxReplicas": settings.job.nodes,
        "rdzvBackend": RDZV_BACKEND,
        "maxRestarts": elastic.max_restarts,
    }


def pytorchjob_manifest(settings: StackSettings, *, image: Any) -> dict[str, Any]:
    """The kubeflow.org/v1 PyTorchJob: one training master plus `nodes - 1` workers, or, for
    an elastic job, `nodes` workers with an elasticPolicy."""
    job = settings.job
    elastic = elastic_policy(settings)
    replica_specs: dict[str, Any] = {}
    if elastic is None:
        replica_specs["Master"] = _replica(settings, image=image, replica_type="Master", replicas=1)
    workers = job.workers if elastic is None else job.nodes
    if workers > 0:
        replica_specs["Worker"] = _replica(
            settings, image=image, replica_type="Worker", replicas=workers
        )
    run_policy: dict[str, Any] = {
        "backoffLimit": job.backoff_limit,
        "cleanPodPolicy": job.clean_pod_policy,
    }
    if job.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = job.ttl_seconds_after_finished
    if job.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = job.active_deadline_seconds
    if elastic is not None and settings.platform == "runai":
        # The gang's minimum: Run:ai schedules the job once this many pods fit, not all.
        run_policy["schedulingPolicy"] = {"minAvailable": elastic["minReplicas"]}
    metadata = object_metadata(settings, resource_names(settings).job, "training")
    metadata["labels"].update({**scheduling_labels(settings), **queue_labels(settings)})
    metadata["annotations"].update(job_annotations(settings))
    spec: dict[str, Any] = {"nprocPerNode": str(job.nproc_per_node)}
    if elastic is not None:
        spec["elasticPolicy"] = elastic
    spec.update({"runPolicy": run_policy, "pytorchReplicaSpecs": replica_specs})
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": spec,
    }


MASTER = "Master"
WORKER = "Worker"
DEFAULT_NPROC_PER_NODE = "auto"


def replica_specs(job: Mapping[str, Any]) -> Mapping[str, Any]:
    specs = job.get("spec", {}).get("pytorchReplicaSpecs")
    if not isinstance(specs, Mapping) or not specs:
        raise JobApiError("spec.pytorchReplicaSpecs is missing or empty")
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
        raise JobApiError("spec.elasticPolicy must be a mapping")
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
        if container.get("name") == CONTAINER_NAME:
            return container
    raise JobApiError(
        f"the {replica_type} replica has no container named {CONTAINER_NAME!r}; "
        "the operator injects its environment into that one and takes the rendezvous port from it"
    )


def replica_port(job: Mapping[str, Any], replica_type: str) -> int:
    """The `pytorchjob-port` of a replica's `pytorch` container (defaulted to 23456)."""
    spec = replica_specs(job).get(replica_type)
    if spec is None:
        raise JobApiError(f"the job has no {replica_type} replica spec")
    container = training_container(spec.get("template", {}), replica_type)
    for port in container.get("ports", []) or []:
        if port.get("name") == PORT_NAME:
            return int(port["containerPort"])
    return MASTER_PORT


def master_port(job: Mapping[str, Any]) -> int:
    return replica_port(job, MASTER)


def _elastic_env(job: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, str]:
    specs = replica_specs(job)
    if WORKER not in specs:
        raise JobApiError("an elasticPolicy needs a Worker replica spec (the operator's rule)")
    if policy.get("nProcPerNode") is not None and job["spec"].get("nprocPerNode") is not None:
        raise JobApiError("spec.elasticPolicy.nProcPerNode must not be used with spec.nprocPerNode")
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
        "PET_RDZV_BACKEND": str(policy.get("rdzvBackend") or RDZV_BACKEND),
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
        raise JobApiError(f"the job has no {replica_type!r} replica spec")
    if not 0 <= index < replica_count(specs[replica_type]):
        raise JobApiError(
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


def _backoff_limit(job: Mapping[str, Any]) -> int | None:
    value = (job.get("spec", {}).get("runPolicy") or {}).get("backoffLimit")
    return None if value is None else int(value)


class PyTorchJobApi(JobApi):
    name = "pytorchjob"
    group, version, plural, kind = "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"
    container = CONTAINER_NAME
    replica_order = (MASTER, WORKER)
    master_addr_keys = ("MASTER_ADDR", "PET_MASTER_ADDR")
    master_port_keys = ("MASTER_PORT", "PET_MASTER_PORT")
    component = "components.pytorch_job:PyTorchJob"

    def job_manifest(self, settings: StackSettings, *, image: Any) -> dict[str, Any]:
        return pytorchjob_manifest(settings, image=image)

    def rank0_pod(self, settings: StackSettings) -> str:
        # The operator names pods <job>-<type>-<index>: the Master, or an elastic job's worker-0.
        role = WORKER if settings.job.elastic is not None else MASTER
        return pod_name(settings.job.name, role, 0)

    def logs_args(self, settings: StackSettings) -> list[str]:
        return ["logs", "--follow", f"pod/{self.rank0_pod(settings)}"]

    def job_image(self, job: Mapping[str, Any]) -> str | None:
        for spec in (job.get("spec") or {}).get("pytorchReplicaSpecs", {}).values():
            for container in spec["template"]["spec"]["containers"]:
                if container["name"] == self.container:
                    return str(container["image"])
        return None

    def pod_selector(self, job_name: str) -> str:
        return f"{JOB_NAME_LABEL}={job_name}"

    def identify(self, pod: Mapping[str, Any]) -> PodIdentity:
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        name = str(metadata.get("name", ""))
        # The labels, or else the name the operator gives every pod: <job>-<type>-<index>.
        _, named_type, named_index = ["", "", "", *name.rsplit("-", 2)][-3:]
        try:
            index = int(labels.get(REPLICA_INDEX_LABEL, named_index))
        except (TypeError, ValueError):
            index = 0
        replica_type = str(labels.get(REPLICA_TYPE_LABEL, named_type)).capitalize()
        return PodIdentity(replica_type=replica_type, index=index, role=name)

    def conditions(
        self, job: Mapping[str, Any], pods: list[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        return list((job.get("status") or {}).get("conditions") or [])

    def pods(
        self, job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None
    ) -> list[PodRole]:
        specs = replica_specs(job)
        roles = []
        for replica_type, index in replica_pods(job):
            template = specs[replica_type].get("template", {})
            roles.append(
                PodRole(
                    name=pod_name(job["metadata"]["name"], replica_type, index),
                    replica_type=replica_type,
                    index=index,
                    template=template,
                    container=training_container(template, replica_type),
                    restart_policy=specs[replica_type].get("restartPolicy", "OnFailure"),
                    env=injected_env(job, replica_type, index),
                )
            )
        # Rank 0 first: the master role's pod 0 (an elastic job's worker-0).
        first = master_role_pod(job)
        return sorted(roles, key=lambda role: role.name != first)

    def master_address(self, job: Mapping[str, Any]) -> str:
        return master_role_pod(job)

    def master_port(self, job: Mapping[str, Any]) -> int:
        return replica_port(job, master_role(job))

    def is_elastic(self, job: Mapping[str, Any]) -> bool:
        return is_elastic(job)

    def backoff_limit(
        self, job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None
    ) -> int | None:
        return _backoff_limit(job)

    def active_deadline_seconds(self, job: Mapping[str, Any]) -> float | None:
        value = (job.get("spec", {}).get("runPolicy") or {}).get("activeDeadlineSeconds")
        return None if value is None else float(value)


API = PyTorchJobApi()
