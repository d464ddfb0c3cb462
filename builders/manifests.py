"""Kubernetes manifests of the training environment, as pure functions: settings in, dicts out.

Why pure builders: the Pulumi components, the offline renderer (`make render`) and the local
runner must produce the same objects, and a `pulumi preview --diff` shows field-level diffs only
when the program registers real nested dicts rather than one computed blob. Inputs (the image
reference, the registry password) may be Pulumi Outputs; they only ever appear at the leaves.

What belongs to one job API (the job's own object, its container name and ports, its pod names)
is in that API's module, builders/job_apis/; this module builds what every API shares: the
pull Secret, the claim and the pod template.

Least privilege (issue 31): every pod the stack makes (each job API's pods, `make checkpoint`'s
reader) meets Pod Security "restricted" and gets no API access: `pod_security_context` and
`container_security_context` are its one statement, and `automountServiceAccountToken: false`
keeps the service account's token out of the pods (training never talks to the API server, and
a compromised dependency in the image would otherwise hold that token). Running as root is only
ever `job.runAsRoot: true`; the rest (no privilege escalation, no capabilities, the runtime's
seccomp profile, no token) holds for root too. What the controllers add to the pods is their job
API's business (the training operator's init container: builders/job_apis/pytorchjob.py).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from settings.stack import (
    GPU_RESOURCE,
    StackSettings,
    TrainerSetting,
    trainer_settings,
)
from settings.values import (
    APP_DIR,
    CHECKPOINT_DIR_ENV,
    JOB_NAME_ENV,
    METRICS_PORT_ENV,
    SHM_DIR,
    STACK_NAME_ENV,
    quantity_value,
)

ENTRYPOINT = APP_DIR + "/trainer/entrypoint.sh"
CHECKPOINT_VOLUME = "checkpoints"
SHM_VOLUME = "dshm"
# The training container's port rank 0 serves Prometheus' /metrics on (`metrics.enabled`): the
# job's NetworkPolicy and the PodMonitor name it, so a change of `metrics.port` is one place.
METRICS_PORT_NAME = "metrics"
# A job.volumes entry's volume in the pods: `data-<its index>`.
DATA_VOLUME_PREFIX = "data-"
# A job.command under `job.launcher: torchrun`: torchrun takes its nodes, rank, processes per
# node and rendezvous from the PET_* variables the job's controller injects (each of its flags
# reads PET_<FLAG>), so it needs no flag of them in any image.
TORCHRUN = "torchrun"
# torch >= 2.4 lets an elastic job's trainers share the rendezvous agent's TCP store, and a node
# that joins a later round then waits for ever (see trainer/entrypoint.sh, which sets it for the
# trainer): a job.command's elastic pods get it in their environment.
NO_SHARED_RDZV_STORE = {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"}
# The job's GPU resource (`job.gpuResource`), for the policy pack's GPU rule: a policy sees the
# manifest, not the settings.
GPU_RESOURCE_ANNOTATION = "pytorch-distributed/gpu-resource"
# On SIGTERM the trainer commits a checkpoint; torchrun gives its workers 30 s for that before it
# kills them, so the kubelet's grace period must outlast torchrun's (the kubelet's default is
# exactly 30 s, which would cut torchrun's own shutdown short).
TERMINATION_GRACE_SECONDS = 120
RUNAI_SCHEDULER = "runai-scheduler"
# Run:ai associates a workload with its project through these labels: `project` is the label
# Run:ai's docs put on YAML-submitted (third-party) workloads, and `runai/queue` is the queue label
# the Run:ai scheduler reads (docs.run.ai/latest/admin/config/default-scheduler shows project
# namespaces labelled `runai/queue: <project>`; NVIDIA's WorkloadRun reference gives
# `queueLabelKey: runai/queue` for runai-scheduler).
RUNAI_PROJECT_LABEL = "project"
RUNAI_QUEUE_LABEL = "runai/queue"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# The labels Kueue admits a job by, which its webhook then refuses to change ("field is
# immutable"): a job whose queue or priority class changes is submitted again.
KUEUE_ADMISSION_LABELS = (KUEUE_QUEUE_LABEL, KUEUE_PRIORITY_LABEL)
# Policies cannot see the `retain_on_delete` resource option, so the claim also says it in an
# annotation that the policy pack checks; both come from `checkpoints.retainOnDestroy`.
RETAIN_ANNOTATION = "pytorch-distributed/retain-on-destroy"
READER_MANAGER = "pytorch-distributed-retrieve"
# Every object is applied (server-side) under this one field manager, instead of a random name
# per `pulumi up` (pulumi-kubernetes' default). An object an interrupted update created but never
# recorded is adopted by the next update's create; under one name that adoption owns exactly the
# same fields, where a second random name would leave the first co-owning them and turn the next
# change of any of them into an apply conflict.
FIELD_MANAGER_ANNOTATION = "pulumi.com/patchFieldManager"
FIELD_MANAGER = "pytorch-distributed"


@dataclass(frozen=True)
class ResourceNames:
    """metadata.name of each Kubernetes object, so every module refers to them the same way
    (the pods' names are their job API's: `rank0_pod`)."""

    job: str
    # The checkpoint claim; None when checkpoints go to object storage.
    claim: str | None
    pull_secret: str | None
    # The Secret holding `job.secretEnv`'s values, when there are any.
    env_secret: str | None = None
    # The Secret holding the object storage's credentials, when the stack has them.
    storage_secret: str | None = None


def resource_names(settings: StackSettings) -> ResourceNames:
    job = settings.job.name
    pull_secret = f"{job}-registry" if settings.registry is not None else None
    env_secret = f"{job}-env" if settings.job.secret_env else None
    storage = settings.checkpoints.backend
    has_credentials = bool(storage.credentials(settings.checkpoints))
    storage_secret = f"{job}-{storage.name}-credentials" if has_credentials else None
    return ResourceNames(
        job=job,
        claim=settings.checkpoint_claim,
        pull_secret=pull_secret,
        env_secret=env_secret,
        storage_secret=storage_secret,
    )


def common_labels(settings: StackSettings) -> dict[str, str]:
    """Labels on every object, so `kubectl get all -l app.kubernetes.io/instance=<job>` works."""
    return {
        "app.kubernetes.io/name": "pytorch-distributed",
        "app.kubernetes.io/instance": settings.job.name,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def scheduling_labels(settings: StackSettings) -> dict[str, str]:
    """Labels the Run:ai scheduler reads on the job and its pods (none on plain Kubeflow)."""
    if settings.platform != "runai" or settings.runai_project is None:
        return {}
    return {
        RUNAI_PROJECT_LABEL: settings.runai_project,
        RUNAI_QUEUE_LABEL: settings.runai_project,
    }


def queue_labels(settings: StackSettings) -> dict[str, str]:
    """Kueue's labels (`job.queue`, `job.priorityClass`), for the job object alone: Kueue admits
    the job as one workload, all its pods or none. On the pods they would make each pod a
    workload of its own wherever Kueue's pod integration is on."""
    labels = {}
    if settings.job.queue is not None:
        labels[KUEUE_QUEUE_LABEL] = settings.job.queue
    if settings.job.priority_class is not None:
        labels[KUEUE_PRIORITY_LABEL] = settings.job.priority_class
    return labels


def object_metadata(settings: StackSettings, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": settings.namespace,
        "labels": {
            **settings.labels,
            **common_labels(settings),
            "app.kubernetes.io/component": component,
        },
        "annotations": {FIELD_MANAGER_ANNOTATION: FIELD_MANAGER},
    }


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def docker_config(server: str, username: str, password: Any) -> dict[str, Any]:
    """The `.dockerconfigjson` layout the kubelet reads: one `auths` entry for the registry.

    With an Output password, `password` and `auth` stay Outputs at the leaves, for
    Output.json_dumps to serialize without ever exposing the value.
    """
    if isinstance(password, pulumi.Output):
        auth: Any = pulumi.Output.concat(username, ":", password).apply(_b64)
    else:
        password = str(password)
        auth = _b64(f"{username}:{password}")
    return {"auths": {server: {"username": username, "password": password, "auth": auth}}}


def registry_secret_manifest(settings: StackSettings, *, password: Any) -> dict[str, Any]:
    """A kubernetes.io/dockerconfigjson Secret; with an Output password the data stays secret."""
    registry = settings.registry
    name = resource_names(settings).pull_secret
    if registry is None or name is None:
        raise ValueError("registry_secret_manifest needs settings.registry")
    config = docker_config(registry.server, registry.username, password)
    if isinstance(password, pulumi.Output):
        # apply() keeps the secret bit of `password`; wrap again so it holds even if a caller
        # hands in a non-secret Output by mistake.
        encoded: Any = pulumi.Output.secret(pulumi.Output.json_dumps(config).apply(_b64))
    else:
        encoded = _b64(json.dumps(config))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(settings, name, "registry-credential"),
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": encoded},
    }


def _secret_data(value: Any) -> Any:
    """A Secret's `data` entry: base64, and secret all the way when the value is an Output."""
    if isinstance(value, pulumi.Output):
        return pulumi.Output.secret(pulumi.Output.from_input(value).apply(_b64))
    return _b64(str(value))


def environment_secret_manifest(settings: StackSettings) -> dict[str, Any] | None:
    """The Opaque Secret `<job>-env` that holds `job.secretEnv`'s values, one key per variable,
    which the training container reads through `secretKeyRef`; None without any. Its values are
    the program's secret Outputs (the offline tools' REDACTED), so only this object ever holds
    them, and only as secrets."""
    name = resource_names(settings).env_secret
    if name is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(settings, name, "environment"),
        "type": "Opaque",
        "data": {key: _secret_data(value) for key, value in settings.job.secret_env.items()},
    }


def storage_secret_manifest(settings: StackSettings) -> dict[str, Any] | None:
    """The Opaque Secret `<job>-<storage>-credentials` that holds the checkpoint storage's
    credentials (s3: `checkpoints.accessKeyId` and `checkpoints.secretAccessKey`) under the
    variables the containers read them as, through `secretKeyRef` (as `job.secretEnv`'s Secret:
    only this object ever holds them, and only as secrets); None without credentials (a claim,
    or the pods' own identity)."""
    name = resource_names(settings).storage_secret
    if name is None:
        return None
    credentials = settings.checkpoints.backend.credentials(settings.checkpoints)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(settings, name, "checkpoint-storage"),
        "type": "Opaque",
        "data": {key: _secret_data(value) for key, value in credentials.items()},
    }


def checkpoint_claim_manifest(settings: StackSettings) -> dict[str, Any] | None:
    """The checkpoint PVC the stack creates and owns; None when it creates none (its storage
    is not a claim, or it mounts `checkpoints.existingClaim`, someone else's)."""
    storage = settings.checkpoints.backend
    spec = storage.claim_spec(settings)
    if spec is None:
        return None
    metadata = object_metadata(settings, resource_names(settings).claim, "checkpoints")
    if storage.retains_claim(settings.checkpoints):
        metadata["annotations"][RETAIN_ANNOTATION] = "true"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": spec,
    }


@dataclass(frozen=True)
class TrainerArgument:
    """One argument of the trainer's command line and the stack setting it carries, for the
    pods' args (:func:`trainer_args`) and for naming the setting when the trainer refuses its
    value (the local runner's preflight): a job setting's from its field's `TrainerFlag`
    (settings/stack.py), the few the stack derives declared below. tests/builders/
    test_manifests.py holds each one to the trainer's own parser (trainer/cli.py).

    ``field``: the trainer's TrainConfig field it sets; ``flag``: its flag (None: a positional,
    in TRAINER_ARGUMENTS' order); ``setting``: the stack key, as a person writes it;
    ``attribute``: the JobSettings attribute it is, when it is one (a local run's override flags
    go by it); ``value``: its value for a stack, None to leave it to the trainer's default;
    ``switch``: a flag that takes no value (argparse's store_true), given alone when its value
    is true."""

    field: str
    flag: str | None
    setting: str
    value: Callable[[StackSettings], Any]
    attribute: str | None = None
    switch: bool = False


def _job_argument(setting: TrainerSetting) -> TrainerArgument:
    """The argument of a job setting the trainer reads (its TrainerFlag, in settings/stack.py)."""
    attribute, flag = setting.attribute, setting.flag

    def value(settings: StackSettings) -> Any:
        given = getattr(settings.job, attribute)
        if flag.default_is_the_trainers and given == setting.default:
            return None
        return given

    return TrainerArgument(attribute, flag.flag, f"job.{setting.key}", value, attribute=attribute)


def _trainer_arguments() -> tuple[TrainerArgument, ...]:
    """The tutorial's command line first (`--batch_size 32 100 25`: the job settings up to the
    last positional), then where the run lives, the other job settings, and the arguments the
    stack derives: the order every existing job's args have, so none changes."""
    job = [_job_argument(setting) for setting in trainer_settings()]
    last_positional = max(index for index, argument in enumerate(job) if argument.flag is None)
    return (
        *job[: last_positional + 1],
        TrainerArgument(
            "checkpoint_dir",
            "--checkpoint-dir",
            "checkpoints.mountPath (checkpoints.bucket and prefix with storage: s3)",
            lambda s: s.checkpoint_dir,
        ),
        *job[last_positional + 1 :],
        # Fixed whatever number of pods the first rendezvous gathers: the batch of all of them.
        TrainerArgument(
            "global_batch_size",
            "--global-batch-size",
            "job.batchSize x job.nodes x job.gpusPerNode",
            lambda s: s.job.global_batch_size if s.job.elastic is not None else None,
        ),
        # Left out unless set: a stack on a claim never has it, nor an s3 stack whose bucket
        # exists.
        TrainerArgument(
            "create_bucket",
            "--create-bucket",
            "checkpoints.createBucket",
            lambda s: True if s.checkpoints.create_bucket else None,
            switch=True,
        ),
    )


TRAINER_ARGUMENTS = _trainer_arguments()


def trainer_argument(field: str) -> TrainerArgument | None:
    """The argument that sets the trainer's ``field``; None for one no stack setting carries
    (the seed, --keep)."""
    return next((argument for argument in TRAINER_ARGUMENTS if argument.field == field), None)


def trainer_args(settings: StackSettings) -> list[str]:
    """entrypoint.sh arguments: its own flags, `--`, then the trainer CLI."""
    args = ["--max-restarts", str(max_restarts(settings)), "--"]
    for argument in TRAINER_ARGUMENTS:
        value = argument.value(settings)
        if value is None:
            continue
        if argument.switch:
            args += [str(argument.flag)] if value else []
        else:
            args += [str(value)] if argument.flag is None else [argument.flag, str(value)]
    return args


def omp_threads(settings: StackSettings) -> int:
    """Split the pod's CPU request between its processes, so they do not oversubscribe cores."""
    cores = quantity_value(settings.job.cpu)
    return max(1, math.floor(cores / settings.job.nproc_per_node))


# Pod Security "restricted" lets pods choose no other: the container runtime's default filter.
SECCOMP_PROFILE = {"type": "RuntimeDefault"}
# The kubelet changes the claim's ownership to fsGroup only when the claim's root directory does
# not already have it: once, instead of walking a checkpoint directory of terabytes at each start.
FS_GROUP_CHANGE_POLICY = "OnRootMismatch"


def pod_security_context(settings: StackSettings) -> dict[str, Any]:
    """The pods' securityContext: a numeric user (root only with `job.runAsRoot`), its group,
    the claim's group, and the runtime's seccomp profile (what "restricted" asks of a pod)."""
    job = settings.job
    return {
        "runAsNonRoot": not job.run_as_root,
        "runAsUser": job.run_as_user,
        "runAsGroup": job.security_context.run_as_group,
        "fsGroup": job.security_context.fs_group,
        "fsGroupChangePolicy": FS_GROUP_CHANGE_POLICY,
        "seccompProfile": dict(SECCOMP_PROFILE),
    }


def container_security_context() -> dict[str, Any]:
    """Every container's securityContext: what "restricted" asks of each container (these have
    no pod-level field), for root too."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def max_restarts(settings: StackSettings) -> int:
    """torchrun's restarts inside a pod: an elastic job's, else `job.maxRestarts`."""
    job = settings.job
    return job.elastic.max_restarts if job.elastic is not None else job.max_restarts


def run_command(settings: StackSettings) -> dict[str, Any]:
    """The training container's command, args and working directory: the project's trainer
    (entrypoint.sh in the image's APP_DIR), or `job.command` under torchrun or as it is. A
    command of your own starts in the image's WORKDIR, as `docker run` would start it."""
    job = settings.job
    if job.command is None:
        return {"command": [ENTRYPOINT], "args": trainer_args(settings), "workingDir": APP_DIR}
    if job.launcher == "none":
        return {"command": list(job.command), "args": []}
    return {
        "command": [TORCHRUN],
        "args": ["--max-restarts", str(max_restarts(settings)), *job.command],
    }


def contract_env(settings: StackSettings) -> list[dict[str, str]]:
    """What every pod tells any training script (docs/tutorials/your-own-model.md): this run's
    directory on the checkpoint claim (its s3:// URL with object storage), the job's name and
    the stack's, and with `metrics.enabled` the port rank 0 serves Prometheus' /metrics on."""
    env = [
        {"name": CHECKPOINT_DIR_ENV, "value": settings.checkpoint_dir},
        {"name": JOB_NAME_ENV, "value": settings.job.name},
    ]
    if settings.stack_name is not None:
        env.append({"name": STACK_NAME_ENV, "value": settings.stack_name})
    if settings.metrics.enabled:
        env.append({"name": METRICS_PORT_ENV, "value": str(settings.metrics.port)})
    return env


def metrics_ports(settings: StackSettings) -> list[dict[str, Any]]:
    """The training container's port `metrics` (`metrics.enabled`), for each job API to place
    where its pods get their container ports; none without metrics."""
    if not settings.metrics.enabled:
        return []
    return [{"name": METRICS_PORT_NAME, "containerPort": settings.metrics.port, "protocol": "TCP"}]


def storage_env(settings: StackSettings) -> list[dict[str, Any]]:
    """How the pods reach a networked checkpoint storage (s3: boto3's names, for
    trainer/storage/s3.py and any user's code with boto3 alike): its plain environment (the
    endpoint when set, the region), the credentials by reference to the stack's Secret. Empty
    on a claim."""
    env: list[dict[str, Any]] = [
        {"name": name, "value": value}
        for name, value in settings.checkpoints.client_environment.items()
    ]
    secret = resource_names(settings).storage_secret
    if secret is not None:
        credentials = settings.checkpoints.backend.credentials(settings.checkpoints)
        env += [
            {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for key in credentials
        ]
    return env


def container_env(settings: StackSettings) -> list[dict[str, Any]]:
    """The training container's own environment: the stack's, the contract, the object
    storage's (s3), `job.env` (whose OMP_NUM_THREADS wins over the stack's), and `job.secretEnv`
    by reference to its Secret."""
    job = settings.job
    own: dict[str, dict[str, Any]] = {
        "PYTHONUNBUFFERED": {"name": "PYTHONUNBUFFERED", "value": "1"},
        "OMP_NUM_THREADS": {"name": "OMP_NUM_THREADS", "value": str(omp_threads(settings))},
    }
    if job.command is not None and job.launcher == "torchrun" and job.elastic is not None:
        own[NO_SHARED_RDZV_STORE["name"]] = dict(NO_SHARED_RDZV_STORE)
    for entry in [*contract_env(settings), *storage_env(settings)]:
        own[entry["name"]] = entry
    for name, value in job.env.items():
        own[name] = {"name": name, "value": value}
    secret = resource_names(settings).env_secret
    for name in job.secret_env:
        own[name] = {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}}
    return list(own.values())


def data_volume(index: int) -> str:
    return f"{DATA_VOLUME_PREFIX}{index}"


def _container(
    settings: StackSettings, image: Any, *, name: str, ports: list[Mapping[str, Any]]
) -> dict[str, Any]:
    job = settings.job
    limits: dict[str, str] = {"memory": job.memory}
    if job.gpus_per_node > 0:
        limits[job.gpu_resource] = str(job.gpus_per_node)
    mounts: list[dict[str, Any]] = []
    # A networked storage (s3) is reached over the network: no mount.
    if (mount_path := settings.checkpoints.backend.mount_path(settings.checkpoints)) is not None:
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": mount_path})
    mounts.append({"name": SHM_VOLUME, "mountPath": SHM_DIR})
    for index, volume in enumerate(job.volumes):
        mounts.append(
            {
                "name": data_volume(index),
                "mountPath": volume.mount_path,
                "readOnly": volume.read_only,
            }
        )
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        **run_command(settings),
        **({"ports": ports} if ports else {}),
        "env": container_env(settings),
        "resources": {"requests": {"cpu": job.cpu, "memory": job.memory}, "limits": limits},
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
    }


def _co_location_affinity(settings: StackSettings) -> dict[str, Any]:
    """A ReadWriteOnce claim mounts on one node only, so every replica must land on that node."""
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {
                            "app.kubernetes.io/name": "pytorch-distributed",
                            "app.kubernetes.io/instance": settings.job.name,
                        }
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


def pod_template(
    settings: StackSettings,
    *,
    image: Any,
    replica_type: str,
    container: str,
    ports: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The PodTemplateSpec of one replica type (a PyTorchJob's Master or Worker, a TrainJob's
    node), with its training container named as the job's API requires."""
    names = resource_names(settings)
    job = settings.job
    volumes: list[dict[str, Any]] = []
    storage = settings.checkpoints.backend
    if storage.mount_path(settings.checkpoints) is not None:  # a networked one has no volume
        volumes.append({"name": CHECKPOINT_VOLUME, **storage.volume_source(settings)})
    # torch's DataLoader workers and NCCL exchange tensors through /dev/shm; the container
    # runtime's default 64 MiB is far too small.
    volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
    for index, volume in enumerate(job.volumes):
        claim = {"claimName": volume.claim, "readOnly": volume.read_only}
        volumes.append({"name": data_volume(index), "persistentVolumeClaim": claim})
    spec: dict[str, Any] = {
        "containers": [_container(settings, image, name=container, ports=list(ports))],
        "volumes": volumes,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": pod_security_context(settings),
        "automountServiceAccountToken": False,
    }
    if names.pull_secret is not None:
        spec["imagePullSecrets"] = [{"name": names.pull_secret}]
    if settings.platform == "runai":
        spec["schedulerName"] = RUNAI_SCHEDULER
    if storage.co_locates_pods(settings.checkpoints) and job.nodes > 1:
        spec["affinity"] = _co_location_affinity(settings)
    spec.update(scheduling(settings))
    labels = {
        **common_labels(settings),
        **scheduling_labels(settings),
        "app.kubernetes.io/component": replica_type.lower(),
    }
    return {"metadata": {"labels": labels}, "spec": spec}


def scheduling(settings: StackSettings) -> dict[str, Any]:
    """Where the pods may run and how they rank: `job.nodeSelector`, `job.tolerations` and
    `job.priorityClassName`, in the pod spec's words (only what is set)."""
    job = settings.job
    spec: dict[str, Any] = {}
    if job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    if job.tolerations:
        spec["tolerations"] = [toleration.manifest() for toleration in job.tolerations]
    if job.priority_class_name is not None:
        spec["priorityClassName"] = job.priority_class_name
    return spec


def job_annotations(settings: StackSettings) -> dict[str, str]:
    """The job object's own annotations: what the provider waits for, and the GPU resource its
    pods ask for when it is not NVIDIA's (the policy pack reads it, and assumes NVIDIA's
    without it)."""
    annotations = wait_annotations(settings)
    if settings.job.gpu_resource != GPU_RESOURCE:
        annotations[GPU_RESOURCE_ANNOTATION] = settings.job.gpu_resource
    return annotations


# How pulumi-kubernetes deletes the object: `foreground` (its default: the delete returns once
# the object's dependents are gone), `background` (at once; the garbage collector removes them
# after) or `orphan`.
DELETION_PROPAGATION_ANNOTATION = "pulumi.com/deletionPropagationPolicy"


def wait_annotations(settings: StackSettings) -> dict[str, str]:
    """What the Kubernetes provider itself waits for once it has applied the job.

    A PyTorchJob or a TrainJob is a custom resource: pulumi-kubernetes 4.x waits for nothing
    beyond its creation, or skips even that with `pulumi.com/skipAwait`. Its `pulumi.com/waitFor`
    could wait for a condition, but never fails on another one (a Failed job would hold
    `pulumi up` until the timeout) and re-checks it on every later update of the job; so
    `running` and `succeeded` are waited for by the job's resource hooks instead
    (components/job_outcome.py), after the provider returns.
    """
    if settings.job.wait_for == "none":
        return {"pulumi.com/skipAwait": "true"}
    return {}


def checkpoint_reader_pod_manifest(
    settings: StackSettings,
    *,
    name: str,
    image: str,
    pull_secret: str | None,
    node: str | None,
    deadline_seconds: int,
) -> dict[str, Any]:
    """A short-lived pod that mounts the stack's checkpoint storage read-only, so `make
    checkpoint` can read and copy the checkpoints whether the job runs, has finished or is gone
    with the stack.

    It only waits (`sleep`): the copy runs through exec. `deadline_seconds` ends it even if the
    tool that started it is killed before it can delete it. `node` pins it beside the pod that
    has a ReadWriteOnce claim mounted, the one node where that claim can be mounted too. It has
    the job's node selector and tolerations, as the claim may be reachable on its nodes only.
    A networked storage (s3) is not mounted: its root is read directly.
    """
    storage = settings.checkpoints.backend
    mount_path = storage.mount_path(settings.checkpoints)
    if mount_path is None:
        raise ValueError(
            f"checkpoint_reader_pod_manifest: checkpoints.storage is {storage.name}, there is "
            f"nothing to mount; read {settings.checkpoint_dir} directly"
        )
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "reader",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", str(deadline_seconds)],
                "workingDir": "/",
                # The trainer image's package, for `python3 -m trainer.checkpoint` through exec
                # (harmless in any other image).
                "env": [{"name": "PYTHONPATH", "value": APP_DIR}],
                "volumeMounts": [
                    {
                        "name": CHECKPOINT_VOLUME,
                        "mountPath": mount_path,
                        "readOnly": True,
                    }
                ],
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                "securityContext": container_security_context(),
            }
        ],
        "volumes": [{"name": CHECKPOINT_VOLUME, **storage.volume_source(settings, read_only=True)}],
        "restartPolicy": "Never",
        "activeDeadlineSeconds": deadline_seconds,
        "terminationGracePeriodSeconds": 0,
        # The job's user and groups: it reads what the job wrote (files the trainer creates are
        # readable by all; a claim written by someone else must be readable by this user). The
        # claim is mounted read-only, so the kubelet changes no ownership for it.
        "securityContext": pod_security_context(settings),
        "automountServiceAccountToken": False,
    }
    if pull_secret is not None:
        spec["imagePullSecrets"] = [{"name": pull_secret}]
    if settings.platform == "runai":
        spec["schedulerName"] = RUNAI_SCHEDULER
    # It goes where the job's pods may go (tainted GPU nodes, a labelled pool: the claim may be
    # reachable there only), but with no priority to preempt anything for a copy.
    spec.update({k: v for k, v in scheduling(settings).items() if k != "priorityClassName"})
    if node is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            }
        }
    metadata = object_metadata(settings, name, "checkpoint-reader")
    # Started and deleted by `make checkpoint`, never by Pulumi.
    metadata["labels"]["app.kubernetes.io/managed-by"] = READER_MANAGER
    metadata["labels"].update(scheduling_labels(settings))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
