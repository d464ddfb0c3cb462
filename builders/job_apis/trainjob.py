"""TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2.3.0): its builder, the pods JobSet
creates for it and the environment the torch plugin injects into them, and how to find it.

Facts about Trainer v2.3.0 (`pkg/apis/trainer/v1alpha1/trainjob_types.go`, `pkg/constants`,
`pkg/runtime/framework/plugins/torch/torch.go`, `plugins/jobset/builder.go`) and JobSet v0.12.0
this module relies on:
- a TrainJob names a runtime (`spec.runtimeRef`: a namespaced TrainingRuntime or a cluster-wide
  ClusterTrainingRuntime such as the `torch-distributed` one Trainer installs); the runtime's
  JobSet template has a replicated job `node` whose Job template is labelled
  `trainer.kubeflow.org/trainjob-ancestor-step: trainer` and whose pods have a container `node`;
- `spec.trainer` sets that container's image, command, args and env (upserted after the
  runtime's), the pods' resources (`resourcesPerNode`), the number of pods (`numNodes`) and
  `numProcPerNode`; `spec.runtimePatches` (one entry per `manager`, a strategic merge patch of
  the runtime's JobSet spec) adds volumes, image pull secrets, affinity, node selector,
  tolerations, the grace period, the pod's and a container's `securityContext` and volume mounts
  to the runtime's pod template (`PodSpecPatch`), but has no `automountServiceAccountToken` and
  no `priorityClassName`: those are the runtime's own (the stack's runtime sets both; a
  `job.priorityClassName` is refused with `job.clusterRuntime`); the trainer's `env` takes
  `valueFrom` (`job.secretEnv`'s `secretKeyRef`) as a container's does;
- `runtimeRef`, `trainer`, `activeDeadlineSeconds` and most patch fields are immutable
  (`self == oldSelf`): a changed spec replaces the TrainJob, as a changed PyTorchJob spec does;
- the torch plugin injects into the `node` container PET_NNODES (numNodes), PET_NPROC_PER_NODE
  (numProcPerNode, or "auto"), PET_NODE_RANK (the Job completion index, through the downward
  API), PET_MASTER_ADDR `<job>-node-0-0.<job>` and PET_MASTER_PORT 29500, and a container port
  29500; no WORLD_SIZE, RANK or MASTER_ADDR. It has no elastic training (a TODO in torch.go);
- the `node` Job is an Indexed Job, so Kubernetes' Job controller adds JOB_COMPLETION_INDEX (the
  pod's index, from its label) to every container, after the rest;
- JobSet names the Job `<jobset>-node-0` (the JobSet is named after the TrainJob) and its pods
  `<job>-node-0-<index>-<random>`, with the hostname `<job>-node-0-<index>` in the subdomain
  `<job>` (a headless Service), and labels them `jobset.sigs.k8s.io/jobset-name`,
  `jobset.sigs.k8s.io/replicatedjob-name` and `batch.kubernetes.io/job-completion-index`;
- Trainer applies the JobSet on every reconcile of an unfinished TrainJob and never looks at its
  deletionTimestamp (`pkg/controller/trainjob_controller.go`; JobSet itself had the same defect,
  kubernetes-sigs/jobset#561): a TrainJob deleted in the foreground gets its JobSet back each time
  the garbage collector removes it, and its deletion can go on for minutes or for ever;
- the TrainJob's conditions are Suspended, Complete and Failed; nothing says Running, so a
  TrainJob whose `numNodes` trainer pods all run is Running here (as a PyTorchJob is once its
  pods run).

Least privilege (builders/manifests.py): the pods' and the `node` container's securityContext
go in the runtime patch, so they hold on the cluster's runtime too; the service account token is
kept out by the stack's TrainingRuntime (`automountServiceAccountToken: false`), and on the
cluster's runtime (`job.clusterRuntime`) by whatever that runtime says. Neither Trainer v2.3.0
nor JobSet v0.12.0 adds a container to the `node` pods of a torch runtime: their containers are
the runtime's and the patch's (Trainer appends init containers only under its Flux policy,
`plugins/flux`).

The TrainingRuntime the stack declares (unless `job.clusterRuntime` names the cluster's) holds
what a PyTorchJob's replica spec and run policy hold: the pods' restart policy (`ExitCode`
becomes the Job's podFailurePolicy: a pod that exited 128 or more, preempted or killed, is
recreated without counting, one that exited 1-127 fails the job), the backoff limit and the
JobSet's TTL, and the `node` container's port `metrics` (`metrics.enabled`: a runtime patch's
container has no ports, and the torch plugin adds its 29500 beside the runtime's). Its name
carries a digest of its spec, so a change of policy creates a new runtime and replaces the
TrainJob (the old runtime goes once no TrainJob uses it: Trainer keeps a `resource-in-use`
finalizer on it until then).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from builders.job_apis import JobApi, JobApiError, PodIdentity, PodRole
from builders.manifests import (
    DELETION_PROPAGATION_ANNOTATION,
    job_annotations,
    metrics_ports,
    object_metadata,
    pod_template,
    queue_labels,
    resource_names,
)
from settings.stack import GPU_RESOURCE
from settings.values import quantity_value

if TYPE_CHECKING:
    from settings.stack import StackSettings

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
NODE = "node"  # the trainer's replicated job and its container (constants.Node)
TRAINER_PORT = 29500  # constants.ContainerTrainerPort
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
# Trainer requires a domain-prefixed path (`<subdomain>/<path>`, as Kueue's
# `kueue.x-k8s.io/manager`); the project's own annotations use the same prefix.
PATCH_MANAGER = "pytorch-distributed/pulumi"
JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# A container's exit code is 0-255: 128 and above is a signal (preempted, SIGKILLed).
SIGNAL_EXIT_CODES = list(range(128, 256))


def runtime_kind(settings: StackSettings) -> str:
    return "TrainingRuntime" if settings.job.cluster_runtime is None else "ClusterTrainingRuntime"


def _node_job_spec(settings: StackSettings) -> dict[str, Any]:
    """The `node` Job's restart rules: the PyTorchJob's restartPolicy, in Job terms."""
    job = settings.job
    if job.restart_policy == "ExitCode":
        rules = [
            {
                "action": "Ignore",
                "onExitCodes": {
                    "containerName": NODE,
                    "operator": "In",
                    "values": SIGNAL_EXIT_CODES,
                },
            }
        ]
        return {"backoffLimit": 0, "podFailurePolicy": {"rules": rules}, "restartPolicy": "Never"}
    if job.restart_policy == "OnFailure":
        return {"backoffLimit": job.backoff_limit, "restartPolicy": "OnFailure"}
    return {"backoffLimit": 0, "restartPolicy": "Never"}


def _runtime_spec(settings: StackSettings) -> dict[str, Any]:
    rules = _node_job_spec(settings)
    job_spec: dict[str, Any] = {"backoffLimit": rules["backoffLimit"]}
    if "podFailurePolicy" in rules:
        job_spec["podFailurePolicy"] = rules["podFailurePolicy"]
    pod: dict[str, Any] = {
        "restartPolicy": rules["restartPolicy"],
        # Pod fields a runtime patch cannot set (see the module docstring).
        "automountServiceAccountToken": False,
    }
    if settings.job.priority_class_name is not None:
        pod["priorityClassName"] = settings.job.priority_class_name
    # The `metrics` port goes here: a runtime patch's container has no ports, and Trainer keeps
    # the runtime's ports when it adds its own (the torch plugin's UpsertPort).
    container: dict[str, Any] = {"name": NODE}
    if ports := metrics_ports(settings):
        container["ports"] = ports
    job_spec["template"] = {"spec": {**pod, "containers": [container]}}
    jobset_spec: dict[str, Any] = {
        "replicatedJobs": [
            {
                "name": NODE,
                "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}}, "spec": job_spec},
            }
        ]
    }
    if settings.job.ttl_seconds_after_finished is not None:
        jobset_spec["ttlSecondsAfterFinished"] = settings.job.ttl_seconds_after_finished
    # numNodes is the TrainJob's (spec.trainer.numNodes overrides the runtime's).
    return {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": jobset_spec}}


def runtime_name(settings: StackSettings) -> str:
    """The cluster's runtime, or the stack's: `<job>-<digest of its spec>` (see the module)."""
    if settings.job.cluster_runtime is not None:
        return settings.job.cluster_runtime
    digest = hashlib.sha256(
        json.dumps(_runtime_spec(settings), sort_keys=True).encode("utf-8")
    ).hexdigest()
    return f"{settings.job.name}-{digest[:8]}"


def trainingruntime_manifest(settings: StackSettings) -> dict[str, Any] | None:
    """The TrainingRuntime the stack declares; None when it runs on the cluster's runtime."""
    if settings.job.cluster_runtime is not None:
        return None
    metadata = object_metadata(settings, runtime_name(settings), "training-runtime")
    metadata["labels"][FRAMEWORK_LABEL] = "torch"
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRuntime",
        "metadata": metadata,
        "spec": _runtime_spec(settings),
    }


def trainjob_manifest(settings: StackSettings, *, image: Any) -> dict[str, Any]:
    """The TrainJob: the trainer's image, command, args, env, resources and node count, and the
    pod template's additions (claim, /dev/shm, pull secret, co-location, grace period, the pod's
    and the container's securityContext) as its runtime patch."""
    job = settings.job
    template = pod_template(settings, image=image, replica_type=NODE, container=NODE)
    pod = template["spec"]
    container = pod["containers"][0]
    trainer: dict[str, Any] = {
        "image": image,
        "command": container["command"],
        "args": container["args"],
        "env": container["env"],
        "numNodes": job.nodes,
        "numProcPerNode": job.nproc_per_node,
        "resourcesPerNode": container["resources"],
    }
    pod_patch: dict[str, Any] = {
        "volumes": pod["volumes"],
        "containers": [
            {
                "name": NODE,
                "volumeMounts": container["volumeMounts"],
                "securityContext": container["securityContext"],
            }
        ],
        "terminationGracePeriodSeconds": pod["terminationGracePeriodSeconds"],
        "securityContext": pod["securityContext"],
    }
    for key in ("imagePullSecrets", "affinity", "nodeSelector", "tolerations"):
        if key in pod:
            pod_patch[key] = pod[key]
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "template": {
                                "spec": {
                                    "template": {
                                        "metadata": template["metadata"],
                                        "spec": pod_patch,
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
    metadata = object_metadata(settings, resource_names(settings).job, "training")
    metadata["labels"].update(queue_labels(settings))
    metadata["annotations"].update(job_annotations(settings))
    # Trainer re-applies the JobSet of a TrainJob that is being deleted (TrainJobApi.run_object):
    # deleted in the foreground, as pulumi-kubernetes deletes by default, the TrainJob would wait
    # on a JobSet that comes back each time the garbage collector removes it.
    metadata["annotations"][DELETION_PROPAGATION_ANNOTATION] = "background"
    spec: dict[str, Any] = {
        "runtimeRef": {
            "name": runtime_name(settings),
            "apiGroup": GROUP,
            "kind": runtime_kind(settings),
        },
        "trainer": trainer,
        "runtimePatches": [patch],
    }
    if job.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = job.active_deadline_seconds
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": spec,
    }


# -- the pods and their environment -------------------------------------------------------------


def _trainer(job: Mapping[str, Any]) -> Mapping[str, Any]:
    trainer = (job.get("spec") or {}).get("trainer")
    if not isinstance(trainer, Mapping):
        raise JobApiError("spec.trainer is missing: the TrainJob says nothing of its trainer")
    return trainer


def num_nodes(job: Mapping[str, Any]) -> int:
    return int(_trainer(job).get("numNodes", 1))


def nproc_per_node(job: Mapping[str, Any]) -> str:
    """PET_NPROC_PER_NODE: numProcPerNode, else "auto", which becomes the CPU request's whole
    cores when the pods ask for no GPU."""
    trainer = _trainer(job)
    if trainer.get("numProcPerNode") is not None:
        return str(int(trainer["numProcPerNode"]))
    resources = trainer.get("resourcesPerNode") or {}
    gpus = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
        resources.get("requests") or {}
    ).get(GPU_RESOURCE)
    if gpus:
        return "auto"
    cpu = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu")
    return str(max(1, int(quantity_value(str(cpu))) if cpu else 0))


def master_address(job_name: str) -> str:
    """Rank 0's name: the first pod of the first `node` Job, in the JobSet's subdomain."""
    return f"{job_name}-{NODE}-0-0.{job_name}"


def injected_env(job: Mapping[str, Any], index: int) -> dict[str, str]:
    """What the torch plugin puts into the `node` container of pod `index` (after trainer.env),
    then the Job controller's JOB_COMPLETION_INDEX; PET_NODE_RANK is that same completion index,
    which the downward API gives the pod."""
    nodes = num_nodes(job)
    if not 0 <= index < nodes:
        raise JobApiError(f"node index {index} is outside 0..{nodes - 1}")
    return {
        "PET_NNODES": str(nodes),
        "PET_NPROC_PER_NODE": nproc_per_node(job),
        "PET_NODE_RANK": str(index),
        "PET_MASTER_ADDR": master_address(job["metadata"]["name"]),
        "PET_MASTER_PORT": str(TRAINER_PORT),
        "JOB_COMPLETION_INDEX": str(index),
    }


def _patched_pod(job: Mapping[str, Any]) -> Mapping[str, Any]:
    for patch in (job.get("spec") or {}).get("runtimePatches") or []:
        replicated = (
            ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        ).get("replicatedJobs") or []
        for entry in replicated:
            if entry.get("name") == NODE:
                return ((entry.get("template") or {}).get("spec") or {}).get("template") or {}
    return {}


def _runtime_node_job(runtime: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if runtime is None:
        return {}
    replicated = (((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "replicatedJobs"
    ) or []
    for entry in replicated:
        if entry.get("name") == NODE:
            return (entry.get("template") or {}).get("spec") or {}
    raise JobApiError(f"the runtime has no replicated job named {NODE!r}")


def node_template(
    job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The `node` pods' template as JobSet creates them: the runtime's, the TrainJob's patch
    (a strategic merge: the securityContexts merge field by field) and its trainer (image,
    command, args, env, resources) on the `node` container."""
    trainer = _trainer(job)
    base = dict((_runtime_node_job(runtime).get("template") or {}).get("spec") or {})
    patched = _patched_pod(job)
    patched_spec = patched.get("spec") or {}
    spec: dict[str, Any] = {**base, **patched_spec}
    if "securityContext" in patched_spec:
        spec["securityContext"] = {
            **(base.get("securityContext") or {}),
            **patched_spec["securityContext"],
        }
    runtime_container = next(
        (c for c in base.get("containers") or [] if c.get("name") == NODE), {"name": NODE}
    )
    patched_container = next(
        (c for c in patched_spec.get("containers") or [] if c.get("name") == NODE), {}
    )
    mounts = patched_container.get("volumeMounts") or []
    env = {e["name"]: e for e in runtime_container.get("env") or []}
    env.update({e["name"]: e for e in trainer.get("env") or []})
    container: dict[str, Any] = {**runtime_container, "name": NODE}
    for key in ("image", "command", "args"):
        if trainer.get(key) is not None:
            container[key] = trainer[key]
    container["env"] = list(env.values())
    if trainer.get("resourcesPerNode") is not None:
        container["resources"] = trainer["resourcesPerNode"]
    container["volumeMounts"] = [*(runtime_container.get("volumeMounts") or []), *mounts]
    if "securityContext" in patched_container:
        container["securityContext"] = {
            **(runtime_container.get("securityContext") or {}),
            **patched_container["securityContext"],
        }
    # The runtime's own ports (the stack's `metrics`), then the torch plugin's (UpsertPort).
    ports = [
        port
        for port in runtime_container.get("ports") or []
        if port.get("containerPort") != TRAINER_PORT
    ]
    container["ports"] = [*ports, {"containerPort": TRAINER_PORT}]
    spec["containers"] = [container]
    return {"metadata": patched.get("metadata") or {}, "spec": spec}


def restart_policy(runtime: Mapping[str, Any] | None) -> str:
    """The PyTorchJob-style restart policy the runtime's `node` Job amounts to."""
    node_job = _runtime_node_job(runtime)
    if node_job.get("podFailurePolicy"):
        return "ExitCode"
    pod_policy = ((node_job.get("template") or {}).get("spec") or {}).get("restartPolicy")
    # Unset: JobSet's defaulting webhook makes it OnFailure.
    return str(pod_policy or "OnFailure")


class TrainJobApi(JobApi):
    name = "trainjob"
    group, version, plural, kind = GROUP, VERSION, "trainjobs", "TrainJob"
    container = NODE
    replica_order = (NODE.capitalize(),)
    master_addr_keys = ("PET_MASTER_ADDR",)
    master_port_keys = ("PET_MASTER_PORT",)
    run_object = (JOBSET_GROUP, JOBSET_VERSION, "jobsets")
    component = "components.train_job:TrainJob"

    def job_manifest(self, settings: StackSettings, *, image: Any) -> dict[str, Any]:
        return trainjob_manifest(settings, image=image)

    def runtime_manifest(self, settings: StackSettings) -> dict[str, Any] | None:
        return trainingruntime_manifest(settings)

    def rank0_pod(self, settings: StackSettings) -> str:
        return f"{settings.job.name}-{NODE}-0-0"

    def _rank0_selector(self, job_name: str) -> str:
        return f"{self.pod_selector(job_name)},{COMPLETION_INDEX_LABEL}=0"

    def logs_args(self, settings: StackSettings) -> list[str]:
        # Pod names end in a random suffix: rank 0 is the pod of completion index 0.
        selector = self._rank0_selector(settings.job.name)
        return ["logs", "--follow", "--selector", selector, "--container", NODE]

    def job_image(self, job: Mapping[str, Any]) -> str | None:
        image = ((job.get("spec") or {}).get("trainer") or {}).get("image")
        return str(image) if image else None

    def pod_selector(self, job_name: str) -> str:
        return f"{JOBSET_NAME_LABEL}={job_name},{REPLICATED_JOB_LABEL}={NODE}"

    def identify(self, pod: Mapping[str, Any]) -> PodIdentity:
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        try:
            index = int(labels.get(COMPLETION_INDEX_LABEL, 0))
        except (TypeError, ValueError):
            index = 0
        job = labels.get(JOBSET_NAME_LABEL, "")
        replicated = labels.get(REPLICATED_JOB_LABEL, NODE)
        job_index = labels.get(JOB_INDEX_LABEL, "0")
        role = (pod.get("spec") or {}).get("hostname") or f"{job}-{replicated}-{job_index}-{index}"
        return PodIdentity(replica_type=str(replicated).capitalize(), index=index, role=role)

    def conditions(
        self, job: Mapping[str, Any], pods: list[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """Complete is the Succeeded of the words every job is told in; Running is derived
        from the pods (see the module docstring)."""
        conditions: list[Mapping[str, Any]] = []
        for condition in (job.get("status") or {}).get("conditions") or []:
            renamed = {"Complete": "Succeeded"}.get(condition.get("type"), condition.get("type"))
            conditions.append({**condition, "type": renamed})
        finished = any(
            c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
            for c in conditions
        )
        running = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and not (p.get("metadata") or {}).get("deletionTimestamp")
        ]
        try:
            wanted = num_nodes(job)
        except JobApiError:
            wanted = 1
        if not finished and running and len(running) >= wanted:
            since = max(str((p.get("status") or {}).get("startTime") or "") for p in running)
            conditions.append(
                {
                    "type": "Running",
                    "status": "True",
                    "reason": "TrainerPodsRunning",
                    "message": f"all {wanted} trainer pods are running",
                    "lastTransitionTime": since,
                }
            )
        return conditions

    def pods(
        self, job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None
    ) -> list[PodRole]:
        template = node_template(job, runtime)
        container = template["spec"]["containers"][0]
        policy = restart_policy(runtime) if runtime is not None else "OnFailure"
        name = job["metadata"]["name"]
        return [
            PodRole(
                name=f"{name}-{NODE}-0-{index}",
                replica_type=NODE.capitalize(),
                index=index,
                template=template,
                container=container,
                restart_policy=policy,
                env=injected_env(job, index),
            )
            for index in range(num_nodes(job))
        ]

    def master_address(self, job: Mapping[str, Any]) -> str:
        return master_address(job["metadata"]["name"])

    def master_port(self, job: Mapping[str, Any]) -> int:
        return TRAINER_PORT

    def backoff_limit(
        self, job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None
    ) -> int | None:
        value = _runtime_node_job(runtime).get("backoffLimit")
        return None if value is None else int(value)

    def active_deadline_seconds(self, job: Mapping[str, Any]) -> float | None:
        value = (job.get("spec") or {}).get("activeDeadlineSeconds")
        return None if value is None else float(value)


API = TrainJobApi()
