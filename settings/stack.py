"""Every stack setting, declared once, read and validated once, into frozen dataclasses.

Why one module: the Pulumi program, the offline renderer and the local runner must agree on what
a stack means, and a bad value must stop `pulumi up` before a single resource is registered. So
all parsing lives here, is pure (plain mappings in, dataclasses out) and raises `SettingsError`
naming the key, the value and what is allowed. Only `load_settings` touches the Pulumi runtime.

Why declarations: each key is one field below (name, type, default, bounds or pattern, help);
pydantic parses from it, and the unknown-key check, the error line (`_settings_error`) and the
docs' settings table (`settings_table_markdown`) are derived from it, so they cannot drift apart.
Pydantic because coercion, bounds, patterns, nested objects and the location of each error are
what a settings reader needs, and it gives them from the declaration alone; this module only adds
the words. The shapes a value may take (names, quantities, image references, labels) live in
settings/values.py, so a person adding a key reads the declarations first.

`pulumi config set --path job.nodes 3` stores 3 as a number (with `--path`, integers become
numbers and "true"/"false" booleans; everything else, and every top-level value, is a string),
but a stack file may quote a value (`cpu: "1"`) and `--type string` forces a string, so the
string spelling of a number or a boolean ("3", "true") is accepted too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FunctionType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Le
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.dataclasses import dataclass, is_pydantic_dataclass
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from settings.checkpoint_storage import (
    CheckpointStorage,
    owners_of,
    secret_checkpoint_keys,
    storage_named,
    storage_names,
)
from settings.values import (
    APP_DIR,
    BASE_IMAGE_ARG,
    REDACTED,
    SHM_DIR,
    AccessMode,
    Allowed,
    Boolean,
    BuildArgs,
    CleanPodPolicy,
    Command,
    DnsLabel,
    EnvMap,
    ExtendedResource,
    GroupId,
    ImageBuilder,
    ImagePlatform,
    ImageRef,
    ImageRepository,
    Integer,
    IpBlock,
    JobApiName,
    JobName,
    LabelKey,
    Labels,
    LabelValue,
    Launcher,
    MountPath,
    Namespaces,
    NodeSelector,
    ObjectName,
    Parallelism,
    PathSecret,
    Platform,
    PodLabels,
    Port,
    Ports,
    ProjectPath,
    PrometheusDuration,
    Quantity,
    RegistryServer,
    RestartPolicy,
    RunaiProject,
    S3Bucket,
    S3Endpoint,
    S3Prefix,
    S3Region,
    Secret,
    SecretEnvMap,
    TaintEffect,
    TaskRef,
    Text,
    TolerationOperator,
    UserId,
    WaitFor,
    is_loopback,
    is_pinned,
    refusal,
    registry_host,
    server_host,
)

PROJECT = "pytorch-distributed"
# Config namespaces a stack file may use: the project's own, the engine's (`pulumi:`) and those
# of the providers the program creates (pulumi_kubernetes, pulumi_docker). A key under any other
# namespace is read by nothing; `pytorch_distributed:job` would silently leave the job at its
# defaults, so it is refused.
PROVIDER_NAMESPACES = ("pulumi", "kubernetes", "docker")
REPO_ROOT = Path(__file__).resolve().parent.parent
# The project's trainer: the image's default build context (relative to the project).
TRAINER_CONTEXT = "trainer"
PASSWORD_KEY = "registryPassword"
DEFAULT_BASE_IMAGE = "nvcr.io/nvidia/pytorch:24.07-py3"

MAX_NODES = 1000
MAX_GPUS_PER_NODE = 16
# Under restartPolicy ExitCode the operator recreates a pod that exits 128 or more without ever
# counting it against backoffLimit (kubeflow/trainer#2045): only the job's deadline ends that.
EXIT_CODE_DEADLINE_SECONDS = 7 * 24 * 3600
# The trainer image's own user and group (trainer/Dockerfile's USER; a test checks they agree):
# numeric, so the kubelet can check `runAsNonRoot` without reading the image's /etc/passwd, and
# above the ids distributions give their own accounts and people (so no base image has it).
TRAINER_UID = 10001
TRAINER_GID = 10001
# Linux ids are 32-bit; Kubernetes takes runAsUser, runAsGroup and fsGroup up to 2^31 - 1.
MAX_ID = 2**31 - 1
# Pulling a multi-GB CUDA image onto fresh GPU nodes takes a while; longer means stuck.
RUNNING_TIMEOUT_SECONDS = 30 * 60
# What a pod's GPUs are asked as unless `job.gpuResource` says otherwise (NVIDIA's device plugin).
GPU_RESOURCE = "nvidia.com/gpu"
# The port rank 0 serves Prometheus' /metrics on (`metrics.port`; MetricsSettings says why this
# one), and the rendezvous ports it may not be: the container port `pytorchjob-port` of a
# PyTorchJob and the torch plugin's of a TrainJob (builders/job_apis/; a test holds them equal).
METRICS_PORT = 9450
RENDEZVOUS_PORTS = (23456, 29500)
CODE = "the image's code, where the pods start"


def _registered_storage(name: str) -> str:
    if name not in storage_names():
        raise ValueError("not a registered checkpoint storage")
    return name


# `checkpoints.storage`: one of the registered storages (settings/checkpoint_storage/), so a
# new one is a module and a registration, not an edit here.
StorageName = Annotated[
    str,
    AfterValidator(_registered_storage),
    Allowed(f"expected one of {', '.join(storage_names())}"),
]


class SettingsError(ValueError):
    """A config value is invalid; the message names the key, the value and what is allowed."""


_CONFIG = ConfigDict(
    alias_generator=to_camel,  # config keys are camelCase, attributes snake_case
    validate_by_alias=True,
    validate_by_name=True,  # dataclasses.replace(settings.job, save_every=...) passes names
    extra="forbid",
    regex_engine="python-re",
    use_attribute_docstrings=True,  # a field's docstring is its help, in the docs' table
)
# The validation context while reading config: rules across keys apply then only, because code
# deriving settings from settings (dataclasses.replace in tools/run_local.py) words its own.
_FROM_CONFIG = {"config": True}


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    """Refuse `key` unless `ok`: the rules across keys, in the declarations' validators."""
    if not ok:
        raise refusal(key, value, allowed)


@dataclass(frozen=True, config=_CONFIG)
class _Settings:
    """One config object: null means the default, and a key no field declares is refused (with
    validate_by_name, `extra` alone would let the snake_case attribute names through)."""

    @model_validator(mode="before")
    @classmethod
    def _from_config(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):  # constructor arguments, or not an object at all
            return data
        keys = _config_fields(cls)
        if unknown := [key for key in data if key not in keys]:
            secret = (PASSWORD_KEY,) if cls is StackSettings else ()  # where it belongs
            allowed = f"unknown key; allowed keys are {', '.join((*keys, *secret))}"
            raise refusal(str(unknown[0]), data[unknown[0]], allowed)
        return {key: value for key, value in data.items() if value is not None}


def _default_insecure_registry(data: dict[str, Any]) -> bool:
    """`true` when `image.repository` is on loopback (localhost, 127.0.0.0/8); else `false`"""
    repository = data.get("repository")
    return repository is not None and is_loopback(registry_host(repository))


def _default_dockerfile(data: dict[str, Any]) -> str:
    """`<image.context>/Dockerfile`"""
    return f"{data.get('context', TRAINER_CONTEXT)}/Dockerfile"


@dataclass(frozen=True, config=_CONFIG)
class ImageSettings(_Settings):
    build: Boolean = True
    """build `image.context` and push it, or run `image.ref`"""
    context: ProjectPath = TRAINER_CONTEXT
    """the directory the image is built from, relative to the project: the project's trainer,
    or your own code with its Dockerfile (`make local`'s process backend runs a `job.command`
    there)"""
    dockerfile: ProjectPath = Field(default_factory=_default_dockerfile)
    """the Dockerfile it is built with, relative to the project"""
    build_args: BuildArgs = Field(default_factory=dict)
    """build arguments (`NAME: value`) besides `BASE_IMAGE`, which is `image.baseImage`"""
    repository: ImageRepository | None = None
    """where the built image is pushed; required when building"""
    insecure_registry: Boolean = Field(default_factory=_default_insecure_registry)
    """look the pushed image's digest up in its registry over plain HTTP (the engine's own
    insecure-registry settings decide how it pushes)"""
    builder: ImageBuilder = "buildkit"
    """`buildkit`, Docker Engine's builder, or `classic`, for an engine without BuildKit's
    session endpoint (podman's Docker-compatible API)"""
    base_image: ImageRef = DEFAULT_BASE_IMAGE
    """the `BASE_IMAGE` build argument, what the image is built on: any image with torch
    (and numpy, for the trainer)"""
    platform: ImagePlatform = "linux/amd64"
    """the built image's platform"""
    ref: ImageRef | None = None
    """the prebuilt image, required when not building; pinned by digest ideally"""

    @property
    def pinned(self) -> bool:
        """True when `ref` names an immutable digest (the policy pack insists on it for prod)."""
        return self.ref is not None and is_pinned(self.ref)

    @property
    def trainer_context(self) -> bool:
        """The image is the project's trainer image (its code under APP_DIR/trainer)."""
        return self.context == TRAINER_CONTEXT

    @property
    def build_arguments(self) -> dict[str, str]:
        """Every build argument the image is built with, `BASE_IMAGE` first."""
        return {BASE_IMAGE_ARG: self.base_image, **self.build_args}

    @model_validator(mode="after")
    def _build_or_ref(self, info: ValidationInfo) -> ImageSettings:
        if info.context is not None:
            # A prebuilt image with the default context reads no directory (a program that
            # installed the package has no trainer/ beside it); a context of your own is still
            # where `make local` runs your command.
            _require(
                (not self.build and self.trainer_context) or (REPO_ROOT / self.context).is_dir(),
                "context",
                self.context,
                f"no such directory in the project ({REPO_ROOT}): the directory your image is "
                "built from, relative to the project",
            )
            _require(
                not self.build or (REPO_ROOT / self.dockerfile).is_file(),
                "dockerfile",
                self.dockerfile,
                f"no such file in the project ({REPO_ROOT}): the Dockerfile, relative to the "
                "project (default <image.context>/Dockerfile)",
            )
            _require(
                not self.build or self.repository is not None,
                "repository",
                None,
                "required when image.build is true (where the built image is pushed)",
            )
            _require(
                self.build or self.ref is not None,
                "ref",
                None,
                "required when image.build is false (the prebuilt image)",
            )
            _require(
                not self.build or self.ref is None,
                "ref",
                self.ref,
                "only allowed with image.build: false (a built image is referenced by its digest)",
            )
        return self


@dataclass(frozen=True, config=_CONFIG)
class RegistrySettings(_Settings):
    server: RegistryServer
    """the push logs in and the pods get a pull secret; `image.repository`'s host"""
    username: Text
    """the registry user of the push and of the pull secret"""
    # A top-level key of its own, so `pulumi config set --secret` encrypts it.
    password: Secret = Field(None, alias=PASSWORD_KEY, exclude=True, repr=False)
    """the registry password: required with `registry`, refused without it"""


@dataclass(frozen=True, config=_CONFIG)
class CheckpointSettings(_Settings):
    storage: StorageName = "claim"
    """where checkpoints go: `claim`, a PersistentVolumeClaim the pods mount, or `s3`, a bucket
    of an S3-compatible object store the trainer writes to (no claim, no mount)"""
    size: Quantity = "10Ti"
    """`claim`: the claim's capacity; growing it is an in-place update"""
    storage_class: ObjectName | None = None
    """`claim`: the claim's StorageClass (unset: the cluster's default)"""
    access_mode: AccessMode = "ReadWriteMany"
    """`claim`: `ReadWriteOnce` adds a pod affinity so all replicas share one node;
    `ReadWriteOncePod` only with `job.nodes: 1`"""
    mount_path: MountPath = "/checkpoints"
    """`claim`: where the claim is mounted; checkpoints go to `<mountPath>/<job.name>`"""
    retain_on_destroy: Boolean = True
    """`claim`: keep the claim and its data on `pulumi destroy`"""
    existing_claim: ObjectName | None = None
    """`claim`: mount this PVC instead of creating one (never managed or deleted)"""
    bucket: S3Bucket | None = None
    """`s3`, required there: the bucket; checkpoints go to `s3://<bucket>/<prefix>/<job.name>`"""
    prefix: S3Prefix | None = None
    """`s3`: the key prefix of the stack's runs in the bucket (unset: the bucket's top)"""
    endpoint: S3Endpoint | None = None
    """`s3`: the URL of an S3-compatible service, the pods' `AWS_ENDPOINT_URL_S3` (unset:
    AWS)"""
    region: S3Region = "us-east-1"
    """`s3`: the bucket's region, the pods' `AWS_DEFAULT_REGION`"""
    create_bucket: Boolean = False
    """`s3`: the trainer creates the bucket when it does not exist (`--create-bucket`); else a
    missing bucket fails the job at its start"""
    access_key_id: PathSecret = Field(None, repr=False)
    """`s3`: the access key id, a secret (`pulumi config set --secret --path
    checkpoints.accessKeyId`); with `secretAccessKey` in a Secret the stack owns
    (`<job>-s3-credentials`), read through `secretKeyRef`; neither: the pods' own identity (IRSA,
    workload identity)"""
    secret_access_key: PathSecret = Field(None, repr=False)
    """`s3`: the secret access key, a secret (`pulumi config set --secret --path
    checkpoints.secretAccessKey`); set with `accessKeyId` or not at all"""

    @model_validator(mode="wrap")
    @classmethod
    def _keys_of_its_storage(
        cls, data: Any, handler: ModelWrapValidatorHandler[CheckpointSettings], info: ValidationInfo
    ) -> CheckpointSettings:
        settings = handler(data)
        if info.context is None or not isinstance(data, Mapping):
            return settings
        # What the stack wrote (a default is never refused): pydantic's dataclasses keep no
        # fields-set record, so the config object's own keys say it.
        given = {str(key): value for key, value in data.items() if value is not None}
        storage = settings.backend
        for key in given:
            owners = owners_of(key)
            if owners and storage not in owners:
                owner = owners[0]
                raise refusal(
                    key,
                    REDACTED if key in owner.secret_keys else given[key],
                    f"checkpoints.{key} is for checkpoints.storage: {owner.name}, and "
                    f"{storage.without_keys_of_others}: set checkpoints.storage: {owner.name} "
                    "or leave the key out",
                )
        storage.check(settings, given)
        return settings

    @property
    def backend(self) -> CheckpointStorage:
        """The storage `storage` names: every question about where the runs are goes to it."""
        return storage_named(self.storage)

    @property
    def root(self) -> str:
        """Where the stack's runs live, each in `<root>/<job.name>`: a path the pods mount (the
        claim's mount path), or the URL of a networked storage (`s3://<bucket>[/<prefix>]`)."""
        return self.backend.root(self)

    @property
    def client_environment(self) -> dict[str, str]:
        """The pods' plain environment for reaching the storage (boto3's names for s3); a tool
        reading it from this machine sets the same. Empty for a claim."""
        return self.backend.client_environment(self)


def _default_active_deadline(data: dict[str, Any]) -> int | None:
    """`604800` (7 days) with `restartPolicy: ExitCode`, its only bound on retries; else none"""
    return EXIT_CODE_DEADLINE_SECONDS if data.get("restart_policy") == "ExitCode" else None


@dataclass(frozen=True, config=_CONFIG)
class ElasticSettings(_Settings):
    """An elastic job: torchrun agents that re-form the group when a node leaves or joins."""

    min_nodes: Integer = Field(ge=1, le=MAX_NODES)
    """elastic training: the fewest pods the job trains on (`elasticPolicy.minReplicas`; on
    Run:ai the gang's minimum); it goes on with fewer than `job.nodes` when pods are lost and
    takes them back when they return, resuming exactly from the newest checkpoint each time"""
    max_nodes: Integer | None = Field(None, ge=1, le=MAX_NODES)
    """the most pods it trains on: `job.nodes` (the pods the job has), which is also the
    default"""
    max_restarts: Integer = Field(3, ge=0, le=100)
    """times torchrun re-forms the group after a failure, a lost node included (a node that
    joins costs none; `elasticPolicy.maxRestarts`)"""


@dataclass(frozen=True, config=_CONFIG)
class SecurityContextSettings(_Settings):
    """Who the job's processes are (Pod Security "restricted" wants a numeric non-root user)."""

    run_as_user: UserId | None = Field(None, ge=1, le=MAX_ID)
    """the pods' user (`runAsUser`, with `runAsNonRoot`); unset: `10001`, the trainer image's
    own; another image's non-root user if it needs its own"""
    run_as_group: GroupId = Field(TRAINER_GID, ge=0, le=MAX_ID)
    """the pods' primary group (`runAsGroup`)"""
    fs_group: GroupId = Field(TRAINER_GID, ge=0, le=MAX_ID)
    """the group that owns the checkpoint claim (`fsGroup`, with `fsGroupChangePolicy:
    OnRootMismatch`: where the volume supports it, the kubelet makes the claim group-writable
    once, not at every start)"""


@dataclass(frozen=True, config=_CONFIG)
class VolumeSettings(_Settings):
    """An existing claim of the namespace the pods mount besides the checkpoint claim (a data
    set): never created, changed or deleted by the stack."""

    claim: ObjectName
    """the PersistentVolumeClaim's name"""
    mount_path: MountPath
    """where the pods see it"""
    read_only: Boolean = True
    """mount it read-only (unless `false`: the pods may change the data)"""


@dataclass(frozen=True, config=_CONFIG)
class TolerationSettings(_Settings):
    """A toleration of the pods, in Kubernetes' own shape: it lets them onto nodes whose taints
    it matches."""

    key: LabelKey | None = None
    """the taint's key (none, with `operator: Exists`: every taint)"""
    operator: TolerationOperator = "Equal"
    """`Equal` matches the taint's value, `Exists` any value"""
    value: LabelValue | None = None
    """the taint's value (`Equal` only)"""
    effect: TaintEffect | None = None
    """the taint's effect it tolerates (none: every effect)"""
    toleration_seconds: Integer | None = Field(None, ge=0)
    """`NoExecute` only: how long a pod stays on a node once the taint appears"""

    @model_validator(mode="after")
    def _kubernetes_rules(self, info: ValidationInfo) -> TolerationSettings:
        if info.context is None:
            return self
        _require(
            self.key is not None or self.operator == "Exists",
            "key",
            None,
            "a toleration names the taint's key (or says operator: Exists, which tolerates "
            "every taint)",
        )
        _require(
            self.operator == "Equal" or self.value is None,
            "value",
            self.value,
            "operator: Exists matches any value: leave value out",
        )
        _require(
            self.toleration_seconds is None or self.effect == "NoExecute",
            "tolerationSeconds",
            self.toleration_seconds,
            "only with effect: NoExecute (how long a pod stays once such a taint appears)",
        )
        return self

    def manifest(self) -> dict[str, Any]:
        """The toleration as the pod spec has it (Kubernetes' field names, only those set)."""
        fields = {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
            "tolerationSeconds": self.toleration_seconds,
        }
        return {name: value for name, value in fields.items() if value is not None}


@dataclasses.dataclass(frozen=True)
class TrainerFlag:
    """Marks a `JobSettings` field as a setting the project's trainer reads, declared with the
    field once: its flag on the trainer's command line (None: a positional, in the fields'
    order), the local run's flag that overrides it (`make local`), and whether its default is
    left to the trainer (its flag then given only when set otherwise, so adding such a setting
    changes no existing job's args). The pods' args (builders/manifests.py's
    TRAINER_ARGUMENTS), the refusal beside `job.command` and the local overrides follow from it;
    tests/builders/test_manifests.py holds each to the trainer's own parser (trainer/cli.py,
    which ships alone in the image and so declares its side itself)."""

    flag: str | None
    local_flag: str | None = None
    default_is_the_trainers: bool = False


def _shadows(path: str, other: str) -> bool:
    """Mounting at `path` hides `other`, or is hidden by it: the same, or one inside the other."""
    return path == other or path.startswith(other + "/") or other.startswith(path + "/")


@dataclass(frozen=True, config=_CONFIG)
class JobSettings(_Settings):
    name: JobName = "pytorch-ddp"
    """names the job, its pods, the claim and the pull secret"""
    # Not `platform` (which chooses the scheduler): the API the job is declared with.
    api: JobApiName = "pytorchjob"
    """the job's API: the training operator's PyTorchJob (kubeflow.org/v1), or Kubeflow Trainer
    v2's TrainJob (trainer.kubeflow.org/v1alpha1, on JobSet); see "Which job API" """
    cluster_runtime: ObjectName | None = None
    """`trainjob` only: run on this ClusterTrainingRuntime of the cluster (e.g.
    `torch-distributed`) instead of the TrainingRuntime the stack declares (whose restart policy,
    backoff limit and TTL are the stack's)"""
    nodes: Integer = Field(2, ge=1, le=MAX_NODES)
    """pods: 1 master (it trains) + `nodes - 1` workers"""
    gpus_per_node: Integer = Field(1, ge=0, le=MAX_GPUS_PER_NODE)
    """`0` runs on the CPU with gloo; one process per GPU"""
    batch_size: Annotated[Integer, TrainerFlag("--batch_size")] = Field(32, ge=1)
    """samples per step on each process (an elastic job on fewer pods keeps its global batch:
    then the most a process puts through the model at once)"""
    total_epochs: Annotated[Integer, TrainerFlag(None, "--epochs")] = Field(100, ge=1)
    """epochs to train"""
    save_every: Annotated[Integer, TrainerFlag(None, "--save-every")] = Field(25, ge=1)
    """a checkpoint every this many completed epochs; the last epoch is always saved"""
    dataset_size: Annotated[Integer, TrainerFlag("--dataset-size", "--dataset-size")] = Field(
        2048, ge=1
    )
    """samples in the training set"""
    task: Annotated[TaskRef | None, TrainerFlag("--task")] = None
    """what to train (unset: the trainer's default)"""
    init_from: Annotated[Text | None, TrainerFlag("--init-from")] = None
    """warm start a new run (new `job.name`) from the weights of a checkpoint directory or file
    under `checkpoints.mountPath`, not this job's own (`--init-from`)"""
    max_restarts: Integer = Field(0, ge=0, le=100)
    """torchrun restarts inside a pod"""
    # Before activeDeadlineSeconds, whose default it sets.
    restart_policy: RestartPolicy = "ExitCode"
    """what a failed pod gets: `ExitCode` recreates it when it exited 128 or more (SIGTERM:
    preempted, SIGKILL) and fails the job on 1-127 (the code or the data); `OnFailure` restarts
    it whatever the code, up to `backoffLimit`; `Never` fails the job"""
    backoff_limit: Integer = Field(3, ge=0, le=100)
    """pod restarts before the job fails (`OnFailure`; the operator ignores it under
    `ExitCode`)"""
    cpu: Quantity = "4"
    """CPU request of each pod"""
    memory: Quantity = "16Gi"
    """memory request and limit of each pod"""
    wait_for: WaitFor = "created"
    """what `pulumi up` waits for: nothing, the job's creation, its Running condition, or its
    end (Succeeded); with `running` and `succeeded` a job that fails fails `pulumi up`"""
    running_timeout_seconds: Integer = Field(RUNNING_TIMEOUT_SECONDS, ge=1)
    """with `waitFor: running`: how long `pulumi up` waits for the job to run before it fails,
    naming what each pod waits for (its image, a node it may run on: a taint it does not
    tolerate, a node selector no node matches)"""
    ttl_seconds_after_finished: Integer | None = Field(None, ge=0)
    """the operator deletes the finished job after this many seconds (unset: never)"""
    active_deadline_seconds: Integer | None = Field(default_factory=_default_active_deadline, ge=1)
    """the job fails after running this many seconds"""
    clean_pod_policy: CleanPodPolicy = "Running"
    """which pods the operator deletes when the job finishes: `Running` frees the GPUs of
    pods still running and keeps the failed pods' logs"""
    # Issue 21: checkpoints within an epoch and elastic jobs.
    save_every_steps: Annotated[Integer | None, TrainerFlag("--save-every-steps")] = Field(
        None, ge=1
    )
    """also a checkpoint every this many optimizer steps, mid-epoch too (unset: at epoch ends
    only); a lost pod then costs at most this many steps"""
    elastic: ElasticSettings | None = None
    # Issue 37: models past one GPU's memory.
    parallelism: Annotated[
        Parallelism, TrainerFlag("--parallelism", default_is_the_trainers=True)
    ] = "ddp"
    """`ddp` replicates the model on every process; `fsdp` shards its parameters, gradients and
    optimizer state over them (FSDP2), each writing its shard of a sharded checkpoint
    (`--parallelism`; docs/explanation/trainer.md)"""
    # Issue 31: least privilege.
    security_context: SecurityContextSettings = Field(default_factory=dict, validate_default=True)
    run_as_root: Boolean = False
    """run the pods as root (uid 0) instead of `job.securityContext.runAsUser`, for an image that
    needs it: Pod Security "restricted" refuses such pods, and the policy pack flags it"""
    # Issue 30: your code, your data, your cluster's rules.
    command: Command | None = None
    """what each pod runs instead of the project's trainer: under `torchrun` (one process per
    GPU, its rendezvous from the job's controller), e.g. `[train.py, --epochs, '10']`, or the
    whole command with `job.launcher: none`; the pods get `CHECKPOINT_DIR`, `JOB_NAME` and
    `STACK_NAME`, and `METRICS_PORT` with `metrics.enabled` (docs/tutorials/your-own-model.md)"""
    launcher: Launcher = "torchrun"
    """`torchrun` starts `job.command`; `none` runs it as the container's command (it starts
    torchrun itself, e.g. `[bash, run.sh]`)"""
    env: EnvMap = Field(default_factory=dict)
    """environment variables (`NAME: value`) of the training container, in plain text"""
    secret_env: SecretEnvMap = Field(default_factory=dict, repr=False)
    """environment variables whose values are secrets of the stack's config (`pulumi config set
    --secret --path job.secretEnv.NAME`), kept in a Secret the stack owns (`<job>-env`) and read
    through `secretKeyRef`: never in plain text in the manifests, state, outputs or render"""
    volumes: Annotated[
        tuple[VolumeSettings, ...],
        Allowed("expected a list of objects with keys claim, mountPath, readOnly"),
    ] = ()
    """existing claims the pods mount besides the checkpoint claim (data sets), each
    `{claim, mountPath, readOnly}`"""
    node_selector: NodeSelector = Field(default_factory=dict)
    """node labels (`name: value`) the pods' nodes must have"""
    tolerations: Annotated[
        tuple[TolerationSettings, ...],
        Allowed(
            "expected a list of objects with keys key, operator, value, effect, tolerationSeconds"
        ),
    ] = ()
    """the pods' tolerations, each `{key, operator, value, effect, tolerationSeconds}` as in
    Kubernetes, for tainted (GPU) nodes"""
    priority_class_name: ObjectName | None = None
    """the pods' PriorityClass (`trainjob`: not with `job.clusterRuntime`, whose runtime decides
    it)"""
    gpu_resource: ExtendedResource = GPU_RESOURCE
    """the resource each pod asks `job.gpusPerNode` of (a MIG slice, another vendor's GPU); the
    policy pack compares it with the processes per node"""
    # Issue 32: queueing on a shared cluster.
    queue: DnsLabel | None = None
    """the Kueue LocalQueue (in the job's namespace) the job is submitted to (label
    `kueue.x-k8s.io/queue-name`): Kueue starts the job once its ClusterQueue has quota for every
    pod at once, and suspends it to preempt it (the pods checkpoint on SIGTERM); a change
    replaces the job (Kueue keeps the queue it admitted a job by)"""
    priority_class: DnsLabel | None = None
    """the Kueue WorkloadPriorityClass of the job (label `kueue.x-k8s.io/priority-class`): which
    queued job Kueue admits first, and which running ones it may preempt for it; needs
    `job.queue`; a change replaces the job"""

    @model_validator(mode="before")
    @classmethod
    def _trainer_keys_only_for_the_trainer(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("command") is not None:
            for key in (setting.key for setting in trainer_settings()):
                if data.get(key) is not None:
                    raise refusal(
                        key,
                        data[key],
                        "only the project's trainer reads it, and job.command runs your own "
                        "code: pass your script its own arguments in job.command",
                    )
        return data

    @model_validator(mode="after")
    def _keys_fit_together(self, info: ValidationInfo) -> JobSettings:
        if info.context is None:
            return self
        _require(
            not self.run_as_root or self.security_context.run_as_user is None,
            "securityContext.runAsUser",
            self.security_context.run_as_user,
            "not with job.runAsRoot: true, which runs the pods as root (uid 0): leave one of "
            "them out",
        )
        trainjob = self.api == "trainjob"
        _require(
            trainjob or self.cluster_runtime is None,
            "clusterRuntime",
            self.cluster_runtime,
            "only allowed with job.api: trainjob (a PyTorchJob runs on no runtime)",
        )
        _require(
            self.launcher == "torchrun" or self.command is not None,
            "launcher",
            self.launcher,
            "launcher: none runs job.command as the container's command: set job.command too",
        )
        if both := sorted(set(self.env) & set(self.secret_env)):
            raise refusal(
                f"secretEnv.{both[0]}", REDACTED, f"{both[0]} is in job.env too: keep it in one"
            )
        _require(
            self.priority_class is None or self.queue is not None,
            "priorityClass",
            self.priority_class,
            "a Kueue WorkloadPriorityClass ranks jobs in a queue: set job.queue (the LocalQueue) "
            "too",
        )
        # A TrainJob's runtime patch has no priorityClassName: the stack's runtime carries it.
        _require(
            self.priority_class_name is None or self.cluster_runtime is None,
            "priorityClassName",
            self.priority_class_name,
            "not with job.clusterRuntime: a TrainJob's pods get their priority class from the "
            "runtime, and the cluster's runtime is not the stack's to change",
        )
        for index, volume in enumerate(self.volumes):
            for other in self.volumes[:index]:
                _require(
                    not _shadows(volume.mount_path, other.mount_path),
                    f"volumes[{index}].mountPath",
                    volume.mount_path,
                    f"{other.mount_path} (claim {other.claim}) is mounted there or around it",
                )
            for reserved, what in ((SHM_DIR, "the pods' shared memory"), (APP_DIR, CODE)):
                _require(
                    not _shadows(volume.mount_path, reserved),
                    f"volumes[{index}].mountPath",
                    volume.mount_path,
                    f"it would shadow {reserved} ({what}) or sit inside it",
                )
            _require(
                not _shadows(volume.mount_path, "/dev"),
                f"volumes[{index}].mountPath",
                volume.mount_path,
                "not /dev or inside it (the pods' devices and shared memory)",
            )
        # Trainer v2.3.0's torch plugin sets a fixed PET_NNODES and no rendezvous of its own:
        # elastic PyTorch waits for JobSet to support elastic jobs (a TODO in its torch.go).
        _require(
            not trainjob or self.elastic is None,
            "elastic",
            "set",
            "job.api: trainjob runs jobs of a fixed size only (Trainer v2.3.0 has no elastic "
            "PyTorch); use job.api: pytorchjob for job.elastic",
        )
        if self.elastic is None:
            return self
        elastic = self.elastic
        _require(
            elastic.max_nodes in (None, self.nodes),
            "elastic.maxNodes",
            elastic.max_nodes,
            f"the job has job.nodes = {self.nodes} pods, the most it can train on: set job.nodes "
            "to the largest number of nodes (or leave maxNodes out)",
        )
        _require(
            elastic.min_nodes <= self.nodes,
            "elastic.minNodes",
            elastic.min_nodes,
            f"at most job.nodes ({self.nodes}), the pods the job has",
        )
        _require(
            self.max_restarts == 0,
            "maxRestarts",
            self.max_restarts,
            "with job.elastic, torchrun's restarts are job.elastic.maxRestarts: leave "
            "job.maxRestarts unset",
        )
        return self

    @property
    def runs_trainer(self) -> bool:
        """The pods run the project's trainer (no `job.command`)."""
        return self.command is None

    @property
    def run_as_user(self) -> int:
        """The pods' user: root only when `runAsRoot` says so, else the configured one or the
        trainer image's."""
        if self.run_as_root:
            return 0
        return self.security_context.run_as_user or TRAINER_UID

    @property
    def workers(self) -> int:
        """The master trains too, so a run on N nodes has N - 1 workers."""
        return self.nodes - 1

    @property
    def nproc_per_node(self) -> int:
        """One process per GPU; a CPU (gloo) pod still runs one process."""
        return max(self.gpus_per_node, 1)

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step over all processes when every pod trains."""
        return self.batch_size * self.nodes * self.nproc_per_node


@dataclass(frozen=True, config=_CONFIG)
class EgressSettings(_Settings):
    """A destination the job's pods may open connections to once `network.egress` lists them:
    an address block, or pods (of a namespace, or with labels, or both)."""

    cidr: IpBlock | None = None
    """an address block (`ipBlock`), e.g. an object store's or a proxy's `192.0.2.10/32`"""
    namespace: DnsLabel | None = None
    """the pods of this namespace (all of them, or those with `podLabels`)"""
    pod_labels: PodLabels = Field(default_factory=dict)
    """labels the destination pods carry (`name: value`); without `namespace`, pods of the
    job's own namespace"""
    ports: Ports = ()
    """the destination ports, each TCP and UDP (none: every port)"""

    @model_validator(mode="after")
    def _one_kind_of_destination(self, info: ValidationInfo) -> EgressSettings:
        if info.context is None:
            return self
        pods = self.namespace is not None or bool(self.pod_labels)
        _require(
            self.cidr is not None or pods,
            "cidr",
            None,
            "an egress destination is an address block (cidr) or pods (namespace and/or podLabels)",
        )
        _require(
            self.cidr is None or not pods,
            "cidr",
            self.cidr,
            "either an address block or pods (namespace, podLabels), not both: give each its "
            "own entry",
        )
        return self


@dataclass(frozen=True, config=_CONFIG)
class NetworkSettings(_Settings):
    """Who may reach the job's pods, and whom they may reach (a NetworkPolicy, `<job>-network`).

    The rendezvous (`MASTER_PORT`) and the collectives listen without authentication: a pod
    that reaches them can join, stall or corrupt the run."""

    policy: Boolean = True
    """declare the job's NetworkPolicy: connections to the job's pods only from the job's own
    pods, on every port (the rendezvous and the collectives); `false` only where the cluster
    enforces no NetworkPolicy or another policy already isolates the namespace (the policy
    pack warns, and refuses it in prod)"""
    egress: Annotated[
        tuple[EgressSettings, ...] | None,
        Allowed("expected a list of objects with keys cidr, namespace, podLabels, ports"),
    ] = None
    """unset: the pods may connect anywhere; a list: only to the job's own pods, to name
    resolution (port 53, TCP and UDP, any address) and to these destinations, each `{cidr,
    namespace, podLabels, ports}` (object storage, a package mirror; image pulls are the
    node's, not the pods')"""

    @model_validator(mode="after")
    def _egress_needs_the_policy(self, info: ValidationInfo) -> NetworkSettings:
        if info.context is None:
            return self
        _require(
            self.policy or self.egress is None,
            "egress",
            "[...]",
            "the egress destinations are rules of the job's NetworkPolicy: set network.policy: "
            "true, or leave network.egress out",
        )
        return self


def _not_a_rendezvous_port(port: int) -> int:
    if port in RENDEZVOUS_PORTS:
        raise ValueError("a rendezvous port")
    return port


@dataclass(frozen=True, config=_CONFIG)
class MetricsSettings(_Settings):
    """Prometheus metrics of the run: rank 0 serves `/metrics` on a port of its pod, the job's
    NetworkPolicy lets Prometheus reach it, and a PodMonitor can have the Prometheus Operator
    scrape it (docs/how-to/prometheus.md)."""

    enabled: Boolean = False
    """tell every training container the port (`METRICS_PORT`) and declare it as their
    container port `metrics`: rank 0 serves Prometheus' `/metrics` there (the project's
    trainer; a `job.command` by the same convention); not with `job.clusterRuntime`, whose
    containers the stack cannot give a port"""
    port: Annotated[
        Port,
        AfterValidator(_not_a_rendezvous_port),
        Allowed(
            "expected a port number other than the rendezvous' 23456 (a PyTorchJob's) and "
            "29500 (a TrainJob's):"
        ),
    ] = METRICS_PORT
    """the port rank 0 serves `/metrics` on, in its pod's own network namespace: `9450` is
    outside Linux's ephemeral range (32768-60999, where gloo's and NCCL's sockets get their
    ports) and clear of the rendezvous and of what scrape configs know as something else (9400
    is NVIDIA's DCGM exporter on GPU nodes, 8000 and 8080 any web server's)"""
    scrape_from: Namespaces = ("monitoring",)
    """the namespaces whose pods may connect to the `metrics` port through the job's
    NetworkPolicy (with `network.policy`), on that port only: where Prometheus runs"""
    pod_monitor: Boolean = False
    """declare a PodMonitor `<job>-metrics` (`monitoring.coreos.com/v1`), which has the
    Prometheus Operator scrape the `metrics` port of the job's pods; the cluster needs the
    Operator's PodMonitor CRD, and a Prometheus that selects the PodMonitor; needs
    `metrics.enabled`"""
    interval: PrometheusDuration = "30s"
    """how often Prometheus scrapes the pods through the PodMonitor (its endpoint's
    `interval`)"""

    @model_validator(mode="after")
    def _pod_monitor_needs_the_metrics(self, info: ValidationInfo) -> MetricsSettings:
        if info.context is None:
            return self
        _require(
            self.enabled or not self.pod_monitor,
            "podMonitor",
            self.pod_monitor,
            "the PodMonitor scrapes the port metrics.enabled declares: set metrics.enabled: "
            "true, or leave metrics.podMonitor out",
        )
        return self


def _default_namespace(data: dict[str, Any]) -> str:
    """`default`; `runai-<runaiProject>` on runai"""
    if data.get("platform") == "runai" and data.get("runai_project") is not None:
        return f"runai-{data['runai_project']}"
    return "default"


@dataclass(frozen=True, config=_CONFIG)
class StackSettings(_Settings):
    platform: Platform = "kubeflow"
    """run by the Kubeflow training operator or by NVIDIA Run:ai"""
    runai_project: RunaiProject | None = None  # before namespace, whose default it sets
    """the Run:ai project, required on runai; sets `schedulerName: runai-scheduler` and the
    `project` / `runai/queue` labels"""
    namespace: DnsLabel = Field(default_factory=_default_namespace)
    """the namespace of every object"""
    kube_context: Text | None = None
    """kubeconfig context of the explicit provider (unset: the current one)"""
    labels: Labels = Field(default_factory=dict)
    """extra labels (`name: value`) on the job, the claim and the secret; metadata only, never
    on the pods"""
    image: ImageSettings = Field(default_factory=dict, validate_default=True)
    registry: RegistrySettings | None = None
    checkpoints: CheckpointSettings = Field(default_factory=dict, validate_default=True)
    job: JobSettings = Field(default_factory=dict, validate_default=True)
    network: NetworkSettings = Field(default_factory=dict, validate_default=True)
    metrics: MetricsSettings = Field(default_factory=dict, validate_default=True)
    # The stack's name, which the pods are told (STACK_NAME): not a config key, given by whoever
    # reads the config (the program, the offline tools), as the registry password is.
    stack_name: str | None = Field(None, exclude=True)

    @property
    def checkpoint_dir(self) -> str:
        """The run's root, the one answer to where this job's checkpoints are (the trainer's
        `--checkpoint-dir`, the pods' CHECKPOINT_DIR, the checkpointPath output, the tools): each
        job gets its own directory on the shared claim, `<mountPath>/<job.name>`, or its own
        prefix in the bucket, `s3://<bucket>[/<prefix>]/<job.name>`, so runs never mix
        snapshots."""
        return f"{self.checkpoints.root}/{self.job.name}"

    @property
    def checkpoint_claim(self) -> str | None:
        """The claim the pods mount for checkpoints (the existing one, or the stack's
        `<job>-checkpoints`); None when the storage is not a claim."""
        return self.checkpoints.backend.claim(self)

    @property
    def storage_env(self) -> dict[str, str]:
        """The pods' environment variables the checkpoint storage sets itself (job.env and
        job.secretEnv may not name them): its client's, and its credentials' (REDACTED)."""
        storage = self.checkpoints.backend
        credentials = storage.credentials(self.checkpoints)
        return {
            **storage.client_environment(self.checkpoints),
            **{name: REDACTED for name in credentials},
        }

    @model_validator(mode="after")
    def _across_objects(self, info: ValidationInfo) -> StackSettings:
        if info.context is None:
            return self
        runai, project = self.platform == "runai", self.runai_project
        _require(
            not runai or project is not None,
            "runaiProject",
            None,
            "required when platform is runai (the Run:ai project name)",
        )
        _require(
            runai or project is None, "runaiProject", project, "only allowed when platform is runai"
        )
        _require(
            not runai or self.job.queue is None,
            "job.queue",
            self.job.queue,
            "on platform runai the project's queue decides (runaiProject sets the runai/queue "
            "label); job.queue names a Kueue LocalQueue: leave it out",
        )
        _require(
            not runai or self.job.api == "pytorchjob",
            "job.api",
            self.job.api,
            "platform runai schedules PyTorchJob (and the other kubeflow.org/v1 jobs) but not "
            "Trainer v2's TrainJob: use job.api: pytorchjob on runai",
        )
        # Trainer's runtime patch has no container ports: only the stack's own TrainingRuntime
        # can give the `node` container its `metrics` port.
        _require(
            not self.metrics.enabled or self.job.cluster_runtime is None,
            "metrics.enabled",
            self.metrics.enabled,
            "not with job.clusterRuntime: the metrics port is declared on the stack's own "
            "TrainingRuntime (a TrainJob's runtime patch has no container ports, and the "
            "cluster's runtime is not the stack's to change); leave job.clusterRuntime out",
        )
        if self.registry is not None and self.image.build and self.image.repository is not None:
            host = registry_host(self.image.repository)
            _require(
                host in (None, server_host(self.registry.server)),
                "registry.server",
                self.registry.server,
                f"must be the registry image.repository pushes to ({host})",
            )
        storage = self.checkpoints.backend
        storage.check_stack(self)
        for name in self.storage_env:
            for key, names in (("env", self.job.env), ("secretEnv", self.job.secret_env)):
                _require(
                    name not in names,
                    f"job.{key}.{name}",
                    REDACTED if key == "secretEnv" else names.get(name),
                    f"checkpoints.storage: {storage.name} sets {name} in the pods from the "
                    "checkpoints settings: set it there, or leave it out",
                )
        mount = storage.mount_path(self.checkpoints)
        for index, volume in enumerate(self.job.volumes if mount is not None else ()):
            _require(
                volume.claim != self.checkpoint_claim,
                f"job.volumes[{index}].claim",
                volume.claim,
                f"this is the checkpoint claim, mounted at {mount} already",
            )
            _require(
                not _shadows(volume.mount_path, mount),
                f"job.volumes[{index}].mountPath",
                volume.mount_path,
                f"it would shadow the checkpoint claim's {mount} (checkpoints.mountPath) or sit "
                "inside it",
            )
        # A path on the claim (the only storage the pods share) or a key in the bucket, and not
        # this job's own directory: a warm start is a new run with a directory of its own.
        if (init_from := self.job.init_from) is not None:
            root, own = self.checkpoints.root, self.checkpoint_dir
            where = storage.where
            _require(
                init_from.startswith(root + "/")
                and all(
                    part not in ("", ".", "..") for part in init_from[len(root) + 1 :].split("/")
                ),
                "job.initFrom",
                init_from,
                f"expected a checkpoint directory or file {where}, under {root}/ "
                f"(e.g. {root}/<previous job.name>), without '..' or a trailing '/'",
            )
            _require(
                init_from != own and not init_from.startswith(own + "/"),
                "job.initFrom",
                init_from,
                f"this is the job's own checkpoint directory {own}; a warm start writes a new "
                "run: give the job a new job.name and point job.initFrom at the old one",
            )
        return self


_STACK = TypeAdapter(StackSettings)


def _config_fields(cls: type) -> dict[str, FieldInfo]:
    """A settings class's config keys (aliases) and their declarations; the secret is not one."""
    fields: dict[str, FieldInfo] = cls.__pydantic_fields__  # type: ignore[attr-defined]
    return {str(info.alias): info for info in fields.values() if not info.exclude}


def _optional_of(annotation: Any) -> Any:
    """`X` of an optional key's `X | None`; any other annotation as it is."""
    if get_origin(annotation) in (Union, UnionType):
        others = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(others) == 1:
            return others[0]
    return annotation


def _object_type(annotation: Any) -> type | None:
    """The settings class of an object key (`registry: RegistrySettings | None`) or of a list
    of objects (`network.egress: tuple[EgressSettings, ...] | None`), else None."""
    annotation = _optional_of(annotation)
    return next(filter(is_pydantic_dataclass, (annotation, *get_args(annotation))), None)


def _holds_integer(annotation: Any) -> bool:
    """Whether a key's type is an integer (`int`, annotated or optional) or a list of them
    (`network.egress[].ports`)."""
    pending = [annotation]
    while pending:
        current = pending.pop()
        if current is int:
            return True
        if get_origin(current) is Annotated:
            pending.append(get_args(current)[0])
        elif get_origin(current) in (Union, UnionType):
            pending += get_args(current)
        elif get_origin(current) is tuple:
            pending += [arg for arg in get_args(current) if arg is not Ellipsis]
    return False


def _whole_number(value: Any) -> Any:
    """2.0 as 2; anything else as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def args_fields(cls: type) -> list[tuple[str, FieldInfo]]:
    """A settings class's typed arguments (TrainingEnvironmentArgs, settings/args_codegen.py):
    its config keys by their attribute names, the registry password among them (`password`),
    which a stack keeps as a top-level secret (`registryPassword`) and a program passes inside
    `registry` like any other value."""
    fields: dict[str, FieldInfo] = cls.__pydantic_fields__  # type: ignore[attr-defined]
    return [
        (name, info)
        for name, info in fields.items()
        if not info.exclude or info.alias == PASSWORD_KEY
    ]


def secret_arguments() -> list[tuple[str, str]]:
    """(object, argument) of each argument that holds a secret: those declared `repr=False`
    (the registry password, job.secretEnv), whose values stay secret Outputs."""
    return [
        (key, name)
        for key, info in args_fields(StackSettings)
        if (section := _object_type(info.annotation)) is not None
        for name, field in args_fields(section)
        if not field.repr
    ]


def _renamed(data: Mapping[str, Any], section: type, *, to_alias: bool, at: str) -> dict[str, Any]:
    """`data`'s keys from attribute names to config keys (or back), objects and lists of objects
    too; a name no declaration has is refused, naming it and the names allowed."""
    by_key = {
        (name if to_alias else str(info.alias)): (name, info) for name, info in args_fields(section)
    }
    renamed: dict[str, Any] = {}
    for key, value in data.items():
        if key not in by_key:
            allowed = ", ".join(by_key)
            raise SettingsError(f"unknown argument {at}{key}: the arguments here are {allowed}")
        name, info = by_key[key]
        inner = _object_type(info.annotation)
        if inner is not None and isinstance(value, Mapping):
            value = _renamed(value, inner, to_alias=to_alias, at=f"{at}{key}.")
        elif inner is not None and isinstance(value, list | tuple):
            value = [
                _renamed(item, inner, to_alias=to_alias, at=f"{at}{key}[{index}].")
                if isinstance(item, Mapping)
                else item
                for index, item in enumerate(value)
            ]
        elif to_alias and _holds_integer(info.annotation):
            # A program in another language reaches the component through the provider, whose
            # inputs are a protobuf Struct: every number is a float there, and its `nodes: 2`
            # (or `ports: [443]`) arrives as 2.0 ([443.0]). An integer key takes it as the 2 it
            # was (a stack file's 2.0 stays refused: parse_settings reads those).
            if isinstance(value, list | tuple):
                value = [_whole_number(item) for item in value]
            else:
                value = _whole_number(value)
        renamed[str(info.alias) if to_alias else name] = value
    return renamed


def args_of_config(values: Mapping[str, Any], password: Any = None) -> dict[str, Any]:
    """Config values (a stack file's keys, without the project prefix) and the registry password
    as TrainingEnvironmentArgs: what the stack's program hands the component."""
    args = _renamed(values, StackSettings, to_alias=False, at="")
    if password is not None and isinstance(args.get("registry"), Mapping):
        args["registry"] = {**args["registry"], "password": password}
    return args


def config_of_args(args: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """TrainingEnvironmentArgs as config values and the registry password (parse_settings')."""
    values = _renamed(
        {key: value for key, value in args.items() if value is not None},
        StackSettings,
        to_alias=True,
        at="",
    )
    password = None
    if isinstance(values.get("registry"), Mapping):
        registry = dict(values["registry"])
        password = registry.pop(PASSWORD_KEY, None)
        values["registry"] = registry
    return values, password


def _require_password(settings: StackSettings, password: Any, how: str) -> None:
    if settings.registry is not None and password is None:
        raise _config_error(PASSWORD_KEY, None, f"required when registry is set: {how}")


def parse_args(args: Mapping[str, Any], *, stack: str | None = None) -> StackSettings:
    """Validate TrainingEnvironmentArgs (plain values; the password and job.secretEnv's values
    may be Outputs) into StackSettings, as a stack's config is: the same rules, the same errors."""
    values, password = config_of_args(args)
    settings = parse_settings(values, password=password, stack=stack)
    _require_password(settings, password, "pass registry.password (a secret)")
    return settings


TOP_LEVEL_KEYS: tuple[str, ...] = tuple(_config_fields(StackSettings))
OBJECT_KEYS: tuple[str, ...] = tuple(
    key for key, info in _config_fields(StackSettings).items() if _object_type(info.annotation)
)


def _allowed(info: FieldInfo) -> str:
    """What a key accepts: its type's Allowed words (or a Literal's choices), plus its bounds."""
    metadata, pending, choices = list(info.metadata), [info.annotation], []
    while pending:  # Annotated types nested in `X | None` keep their metadata there
        annotation = pending.pop()
        metadata += getattr(annotation, "__metadata__", ())
        if get_origin(annotation) is Literal:
            choices += get_args(annotation)
        else:
            pending += get_args(annotation)
    words = [str(item) for item in metadata if isinstance(item, Allowed)]
    words = words or [f"expected one of {', '.join(choices)}"]
    bounds = [f">= {item.ge}" for item in metadata if isinstance(item, Ge)]
    bounds += [f"<= {item.le}" for item in metadata if isinstance(item, Le)]
    return " ".join([words[0], " and ".join(bounds)]).strip()


def _config_error(key: str, value: Any, allowed: str) -> SettingsError:
    if value is None:
        return SettingsError(f"missing config {PROJECT}:{key}: {allowed}")
    return SettingsError(f"invalid config {PROJECT}:{key} = {value!r}: {allowed}")


def _is_list(annotation: Any) -> bool:
    """A key whose value is a list (of objects: job.volumes, job.tolerations, network.egress)."""
    return get_origin(_optional_of(annotation)) is tuple


def _key_text(loc: list[Any]) -> str:
    """A location as a person writes the key: `job.volumes[0].mountPath`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f"{'.' if text else ''}{part}"
    return text


def _settings_error(error: ValidationError) -> SettingsError:
    """Pydantic's first error as the one line the CLI prints, worded from the declarations."""
    first = error.errors(include_url=False)[0]
    loc = list(first["loc"])
    if first["type"] == "settings":
        context = first.get("ctx") or {}
        return _config_error(
            _key_text([*loc, context["key"]]), context["value"], context["allowed"]
        )
    section: Any = StackSettings
    info: FieldInfo | None = None
    listed: FieldInfo | None = None  # the list key the location is at, not yet in an item
    for part in loc:
        if isinstance(part, int) and listed is not None:  # an item of the list: an object
            listed = None
            continue
        if isinstance(part, int) and info is not None:  # an item of a list of values: its key's
            break
        if (info := _config_fields(section).get(str(part))) is None:  # pydantic's words
            return _config_error(_key_text(loc), first["input"], first["msg"])
        if inner := _object_type(info.annotation):
            listed = info if _is_list(info.annotation) else None
            section, info = inner, None
    key = _key_text(loc)
    if listed is not None:
        return _config_error(key, first["input"], _allowed(listed))
    if info is None:
        keys = ", ".join(_config_fields(section))
        return _config_error(key, first["input"], f"expected an object with keys {keys}")
    if first["type"] == "missing":
        owner = _key_text(loc[:-1])
        return _config_error(key, None, f"required when {owner} is set; {_allowed(info)}")
    return _config_error(key, first["input"], _allowed(info))


def parse_settings(
    values: Mapping[str, Any], *, password: Any = None, stack: str | None = None
) -> StackSettings:
    """Validate config `values` (keys without the project prefix) into StackSettings.

    `password` is the `registryPassword` secret, passed separately because the program holds it
    as a secret Output and the offline tools hold REDACTED or nothing. `stack` is the stack's
    name, which the pods are told.
    """
    if PASSWORD_KEY in values:
        raise _config_error(
            PASSWORD_KEY,
            REDACTED,
            "pass the registry password separately (parse_settings(password=...))",
        )
    try:
        settings = _STACK.validate_python(values, context=_FROM_CONFIG)
    except ValidationError as error:
        raise _settings_error(error) from None
    if stack is not None:
        settings = dataclasses.replace(settings, stack_name=stack)
    if settings.registry is not None:
        registry = dataclasses.replace(settings.registry, password=password)
        return dataclasses.replace(settings, registry=registry)
    if password is not None:
        raise _config_error(
            PASSWORD_KEY,
            REDACTED,
            "a registry password needs the registry object (registry.server and "
            "registry.username); set them or remove the password",
        )
    return settings


def _project_values(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Strip the project prefix and decode structured (JSON) objects; the providers' namespaces
    pass, any other is refused."""
    values: dict[str, Any] = {}
    for full_key, value in config.items():
        namespace, sep, key = str(full_key).partition(":")
        if not sep:
            namespace, key = PROJECT, namespace
        if namespace in PROVIDER_NAMESPACES:
            continue
        if namespace != PROJECT:
            raise SettingsError(
                f"config key {full_key!r} ({source}) is in namespace {namespace!r}, which "
                f"nothing reads: this project's keys are {PROJECT}:<key> (e.g. "
                f"{PROJECT}:{key}); the other namespaces allowed are the providers' "
                f"({', '.join(PROVIDER_NAMESPACES)})"
            )
        if key in OBJECT_KEYS and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise _config_error(key, value, f"expected an object ({source})") from None
        values[key] = value
    return values


def load_stack_file(stack: str, root: Path = REPO_ROOT) -> StackSettings:
    """Read and validate `Pulumi.<stack>.yaml` offline; secure values become REDACTED."""
    import yaml

    path = Path(root) / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        existing = ", ".join(stack_names(root)) or "none (no Pulumi.<stack>.yaml)"
        raise SettingsError(
            f"stack {stack!r}: no stack file {path}; the stacks in {Path(root)} are {existing}"
        )
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise SettingsError(f"{path} is not valid YAML{where}: {problem}") from None
    config = document.get("config") or {} if isinstance(document, Mapping) else None
    if not isinstance(config, Mapping):
        raise SettingsError(f"{path}: expected a mapping with a 'config' mapping in it")
    values = _project_values(config, str(path))
    password = values.pop(PASSWORD_KEY, None)
    if password is not None:
        password = REDACTED
    for key, value in list(values.items()):
        if _is_secure(value):
            values[key] = REDACTED
    job = values.get("job")
    if isinstance(job, Mapping) and isinstance(job.get("secretEnv"), Mapping):
        secret_env = {
            name: REDACTED if _is_secure(value) else value
            for name, value in job["secretEnv"].items()
        }
        values["job"] = {**job, "secretEnv": secret_env}
    checkpoints = values.get("checkpoints")
    if isinstance(checkpoints, Mapping):  # its credentials, `--secret --path` inside it
        values["checkpoints"] = {
            key: REDACTED if _is_secure(value) else value for key, value in checkpoints.items()
        }
    return parse_settings(values, password=password, stack=stack)


def _is_secure(value: Any) -> bool:
    """A value `pulumi config set --secret` wrote: its ciphertext, `{secure: ...}`."""
    return isinstance(value, Mapping) and set(value) == {"secure"}


def stack_names(root: Path = REPO_ROOT) -> list[str]:
    """The stacks whose files `Pulumi.<stack>.yaml` are in `root`, sorted."""
    return sorted(path.name[len("Pulumi.") : -len(".yaml")] for path in root.glob("Pulumi.*.yaml"))


def _runtime_config() -> dict[str, Any]:
    """The whole config map the engine handed this program (set_all_config and PULUMI_CONFIG)."""
    import pulumi.runtime.config as runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return merged


def _stack_config() -> tuple[dict[str, Any], Any, StackSettings]:
    """The running program's config values, its registry password (a secret Output) and the
    settings they make; any invalid value is one clean RunError line."""
    import pulumi

    config = pulumi.Config(PROJECT)
    try:
        values = _project_values(_runtime_config(), "stack config")
        values.pop(PASSWORD_KEY, None)
        password = config.get_secret(PASSWORD_KEY)
        values = _secret_env_as_secrets(values)
        settings = parse_settings(values, password=password, stack=pulumi.get_stack())
        _require_password(settings, password, "pulumi config set --secret registryPassword")
    except SettingsError as error:
        raise pulumi.RunError(str(error)) from None
    return values, password, settings


def load_settings() -> StackSettings:
    """Settings of the running Pulumi program; any invalid value is one clean RunError line."""
    return _stack_config()[2]


class ValidatedArgs(dict[str, Any]):
    """TrainingEnvironmentArgs that were validated already, with the settings they make: the
    component declares those instead of validating the same config a second time."""

    def __init__(self, args: Mapping[str, Any], settings: StackSettings) -> None:
        super().__init__(args)
        self.settings = settings


def load_args() -> ValidatedArgs:
    """The running program's stack config as TrainingEnvironmentArgs, validated once, here (so a
    bad value stops the program with the same line as ever, before any resource exists), and
    carrying the settings it made for the component."""
    values, password, settings = _stack_config()
    return ValidatedArgs(args_of_config(values, password), settings)


def _secret_env_as_secrets(values: dict[str, Any]) -> dict[str, Any]:
    """`job.secretEnv`'s values and the checkpoints' credentials as secret Outputs, when the
    engine says the config holds them as secrets. The engine decrypts config for the program and
    marks secret whole keys only (the `job` or `checkpoints` object, when `pulumi config set
    --secret --path` put a secret inside it): an object that is not secret holds no secret at
    all, and its values stay plain, which parse_settings refuses. (The offline tools see each
    value's ciphertext, so they check every one.)"""
    import pulumi
    import pulumi.runtime.config as runtime_config

    job = values.get("job")
    if (
        isinstance(job, Mapping)
        and isinstance(job.get("secretEnv"), Mapping)
        and runtime_config.is_config_secret(f"{PROJECT}:job")
    ):
        secret_env = {name: pulumi.Output.secret(value) for name, value in job["secretEnv"].items()}
        values = {**values, "job": {**job, "secretEnv": secret_env}}
    checkpoints = values.get("checkpoints")
    if isinstance(checkpoints, Mapping) and runtime_config.is_config_secret(
        f"{PROJECT}:checkpoints"
    ):
        credentials = {
            key: pulumi.Output.secret(checkpoints[key])
            for key in secret_checkpoint_keys()
            if checkpoints.get(key) is not None
        }
        values = {**values, "checkpoints": {**checkpoints, **credentials}}
    return values


@dataclasses.dataclass(frozen=True)
class TrainerSetting:
    """A `JobSettings` field the trainer reads: its attribute, its key in `job`, its flag and
    its default."""

    attribute: str
    key: str
    flag: TrainerFlag
    default: Any


def trainer_settings() -> list[TrainerSetting]:
    """The settings the project's trainer reads, in their declaration order (the positionals'
    order on its command line)."""
    fields: dict[str, FieldInfo] = JobSettings.__pydantic_fields__  # type: ignore[attr-defined]
    return [
        TrainerSetting(attribute, str(info.alias), flag, info.default)
        for attribute, info in fields.items()
        for flag in info.metadata
        if isinstance(flag, TrainerFlag)
    ]


def job_key(attribute: str) -> str | None:
    """The config key of a `JobSettings` attribute (`dataset_size` -> `job.datasetSize`)."""
    info = _config_fields(StackSettings)["job"]
    section = _object_type(info.annotation)
    field = section.__pydantic_fields__.get(attribute)  # type: ignore[union-attr]
    return f"job.{field.alias}" if field is not None else None


def _declared_keys() -> Iterator[tuple[str, FieldInfo]]:
    """Every key in declaration order, each object's keys after its name, the secret top-level;
    a list of objects (job.volumes) is its own row, then its items' keys (`job.volumes[].claim`)."""
    for key, info in _config_fields(StackSettings).items():
        if (section := _object_type(info.annotation)) is None:
            yield key, info
        for field in getattr(section, "__pydantic_fields__", {}).values():
            if (inner := _object_type(field.annotation)) is not None:  # job.elastic
                prefix = f"{key}.{field.alias}"
                if _is_list(field.annotation):
                    yield prefix, field
                    prefix += "[]"
                for nested in _config_fields(inner).values():
                    yield f"{prefix}.{nested.alias}", nested
                continue
            yield (field.alias if field.exclude else f"{key}.{field.alias}"), field


def _default_text(info: FieldInfo) -> str:
    if (factory := info.default_factory) is not None:  # a derived default's docstring says it
        return str(factory.__doc__) if isinstance(factory, FunctionType) else "—"
    if info.default is PydanticUndefined:
        return "required"
    return "—" if info.default is None else "`" + json.dumps(info.default).strip('"') + "`"


def settings_table_markdown() -> str:
    """The docs' settings table (docs/reference/settings.md, written by tests/docs_blocks.py),
    from the declarations."""
    rows = ["| key | default | allowed | what it does |", "| --- | --- | --- | --- |"]
    for key, info in _declared_keys():
        allowed = _allowed(info).removeprefix("expected ")
        cells = [f"`{key}`", _default_text(info), allowed, " ".join(str(info.description).split())]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"
