"""TrainingEnvironment: the whole training run (image, credential, claim, job) as one component.

It owns the one explicit Kubernetes provider (and the Docker provider when it builds) and hands
them to its children as `providers`, which every resource under them inherits through `parent=`:
the stack files disable the default providers, so nothing can land in whatever cluster the ambient
kubeconfig happens to point at. Which children exist follows `stack_objects`, as the render does.

Its arguments are TrainingEnvironmentArgs (settings/args.py, generated from the
settings declarations): this repository's program builds them from the stack's config
(`load_args`), another program writes them itself and may hand in its own Kubernetes (and Docker)
provider through `opts.providers`, which the component then uses instead of creating one. Either
way they are validated into the same StackSettings, so the same values declare the same objects.
The Python component provider host (provider/) serves it to programs in other languages.
"""

# No `from __future__ import annotations`: the component provider host reads the arguments'
# and the outputs' annotations as objects (provider/__main__.py).
import importlib
import inspect
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

import pulumi
import pulumi_docker as docker
import pulumi_kubernetes as k8s
from pydantic.alias_generators import to_camel

from builders.job_apis import JobApi, api_of_settings
from builders.manifests import resource_names
from builders.stack_objects import stack_objects
from components.checkpoint_volume import CheckpointVolume
from components.job_metrics import JobMetrics
from components.job_network import JobNetwork
from components.stack_secret import StackSecret
from components.training_image import TrainingImage, registry_auth
from components.watched_job import JobArgs
from settings.args import TrainingEnvironmentArgs
from settings.stack import (
    SettingsError,
    StackSettings,
    ValidatedArgs,
    parse_args,
    secret_arguments,
)


def kubectl(settings: StackSettings, *args: str) -> str:
    """A ready-to-paste kubectl command against the stack's context and namespace."""
    words = ["kubectl"]
    if settings.kube_context is not None:
        words += ["--context", settings.kube_context]
    words += ["--namespace", settings.namespace, *args]
    return shlex.join(words)


class JobComponent(Protocol):
    """What every job API's Pulumi component is: built from the job's settings and the stack's
    objects (its job, and its runtime where it has one), it names the job once it exists."""

    job_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: JobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None: ...


def job_component(api: JobApi) -> type[JobComponent]:
    """The Pulumi component of `api`, which names it (`JobApi.component`, "module:Class")."""
    module, _, name = api.component.partition(":")
    component: type[JobComponent] = getattr(importlib.import_module(module), name)
    return component


@dataclass(frozen=True)
class StackOutputs:
    """What `pulumi stack output` shows, declared once: the component registers these and
    __main__.py exports them, each under its attribute's camelCase name (`logs_command` ->
    `logsCommand`), so the two lists cannot drift apart."""

    namespace: pulumi.Output[str]
    job_name: pulumi.Output[str]
    image: pulumi.Output[str]
    """the image the job runs, pinned by digest when built"""
    claim_name: pulumi.Output[str | None]
    """the checkpoint claim; none when checkpoints go to object storage"""
    checkpoint_path: pulumi.Output[str]
    """where this job's checkpoints are: `<mountPath>/<job.name>` on the claim, or
    `s3://<bucket>[/<prefix>]/<job.name>`"""
    logs_command: pulumi.Output[str]
    status_command: pulumi.Output[str]
    checkpoint_command: pulumi.Output[str]

    def by_name(self) -> dict[str, pulumi.Output[str]]:
        """The outputs under their stack output names."""
        return {to_camel(field.name): getattr(self, field.name) for field in fields(self)}


def stack_outputs(
    settings: StackSettings,
    image: pulumi.Output[str],
    claim: pulumi.Output[str | None],
    job: pulumi.Output[str],
) -> StackOutputs:
    """Where the job runs, what it runs, where checkpoints go, and how to watch it."""
    names = resource_names(settings)
    api = api_of_settings(settings)
    return StackOutputs(
        namespace=pulumi.Output.from_input(settings.namespace),
        job_name=job,
        image=image,
        claim_name=claim,
        checkpoint_path=pulumi.Output.from_input(settings.checkpoint_dir),
        logs_command=pulumi.Output.from_input(kubectl(settings, *api.logs_args(settings))),
        status_command=pulumi.Output.from_input(
            kubectl(settings, "get", api.status_resource(names.job), "--watch")
        ),
        # The job's pods may be gone when the checkpoints are wanted (finished, cleaned up,
        # destroyed): tools/retrieve.py reads the claim through a pod of its own (or the bucket).
        checkpoint_command=pulumi.Output.from_input(
            shlex.join(["make", "checkpoint", f"STACK={pulumi.get_stack()}"])
        ),
    )


def _holds_outputs(value: Any) -> bool:
    """Whether `value` is, or holds, a value not known yet (an Output or an awaitable)."""
    if isinstance(value, pulumi.Output) or inspect.isawaitable(value):
        return True
    if isinstance(value, Mapping):
        return any(_holds_outputs(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_outputs(item) for item in value)
    return False


def _split_secrets(args: Mapping[str, Any]) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
    """`args` without their secret arguments (`secret_arguments`), and those by place."""
    public: dict[str, Any] = dict(args)
    secrets: dict[tuple[str, str], Any] = {}
    for key, name in secret_arguments():
        section = public.get(key)
        if isinstance(section, Mapping) and section.get(name) is not None:
            secrets[key, name] = section[name]
            public[key] = {inner: value for inner, value in section.items() if inner != name}
    return public, secrets


def _with_secrets(
    public: Mapping[str, Any], secrets: Mapping[tuple[str, str], Any]
) -> dict[str, Any]:
    """The arguments again, each secret one a secret Output (job.secretEnv: each value), even
    where the caller handed in a plain value: state only ever holds `[secret]`."""
    args = dict(public)
    for (key, name), value in secrets.items():
        if isinstance(value, Mapping):
            value = {item: pulumi.Output.secret(secret) for item, secret in value.items()}
        else:
            value = pulumi.Output.secret(value)
        args[key] = {**args.get(key, {}), name: value}
    return args


class TrainingEnvironment(pulumi.ComponentResource):
    """Composes TrainingImage, JobNetwork, its StackSecrets, CheckpointVolume, JobMetrics (with
    `metrics.podMonitor`) and the job: the component of the job API `job.api` names (a
    PyTorchJob or a TrainJob).

    Its outputs are StackOutputs' fields, as attributes (`environment.job_name`) and in
    `outputs`. An argument that is an Output (another stack's, another resource's) defers the
    declaration of the children until its value is known: a preview that cannot know it shows
    none of them."""

    def __init__(
        self,
        name: str,
        args: TrainingEnvironmentArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:TrainingEnvironment", name, None, opts)
        public, secrets = _split_secrets(args)
        if isinstance(args, ValidatedArgs):  # the stack's own config, validated by load_args
            outputs = self._declare_settings(name, args.settings)
        elif _holds_outputs(public):
            declared = pulumi.Output.from_input(public).apply(
                lambda plain: self._declare(name, _with_secrets(plain, secrets))
            )
            outputs = StackOutputs(
                **{
                    field.name: declared.apply(lambda built, at=field.name: getattr(built, at))
                    for field in fields(StackOutputs)
                }
            )
        else:
            outputs = self._declare(name, _with_secrets(public, secrets))
        self.outputs = outputs
        for field in fields(StackOutputs):
            setattr(self, field.name, getattr(outputs, field.name))
        self.register_outputs(outputs.by_name())

    def _declare(self, name: str, args: Mapping[str, Any]) -> StackOutputs:
        """Validate the arguments as the stack's config is, then declare the children."""
        try:
            settings = parse_args(args, stack=pulumi.get_stack())
        except SettingsError as error:
            raise pulumi.RunError(f"TrainingEnvironment {name}: {error}") from None
        return self._declare_settings(name, settings)

    def _declare_settings(self, name: str, settings: StackSettings) -> StackOutputs:
        """Declare the children of valid settings."""
        # Every child and each of its resources (parent=self) resolve their provider from this
        # map, by package: none can fall back to a default provider.
        child = pulumi.ResourceOptions(
            parent=self, providers=self._create_providers(name, settings)
        )
        image, claim, job = self._create_children(name, settings, child)
        return stack_outputs(settings, image, claim, job)

    def _create_providers(
        self, name: str, settings: StackSettings
    ) -> list[pulumi.ProviderResource]:
        """The providers the caller did not hand in (`opts.providers`): the Kubernetes one of
        `kubeContext` and `namespace`, and the Docker one when the image is built."""
        own = pulumi.ResourceOptions(parent=self)
        providers: list[pulumi.ProviderResource] = []
        if self.get_provider("kubernetes:core/v1:Secret") is None:
            providers.append(
                k8s.Provider(
                    f"{name}-kubernetes",
                    context=settings.kube_context,
                    namespace=settings.namespace,
                    # Server-side apply lets the operator and Run:ai own the fields they add to
                    # the job without Pulumi fighting them on every update.
                    enable_server_side_apply=True,
                    opts=own,
                )
            )
        if settings.image.build and self.get_provider("docker:index/image:Image") is None:
            # The engine comes from DOCKER_HOST (or its default socket) where `pulumi up` runs;
            # the registry credentials serve the lookup of the pushed image's digest.
            auth = registry_auth(settings.image, settings.registry)
            providers.append(
                docker.Provider(f"{name}-docker", registry_auth=auth or None, opts=own)
            )
        return providers

    @staticmethod
    def _create_children(
        name: str, settings: StackSettings, child: pulumi.ResourceOptions
    ) -> tuple[pulumi.Output[str], pulumi.Output[str | None], pulumi.Output[str]]:
        """The image, the job's NetworkPolicy, the pull secret, the environment's and the
        storage's secrets, the claim, the job's PodMonitor and the job; returns the image
        reference, the claim's name (None without a claim: object storage) and the job's
        name."""
        image = TrainingImage(f"{name}-image", settings.image, settings.registry, opts=child)
        registry = settings.registry
        objects = stack_objects(
            settings,
            image=image.image_ref,
            # Secret even if a caller hands in a plain value: state only ever holds `[secret]`.
            password=None if registry is None else pulumi.Output.secret(registry.password),
        )
        job_dependencies: list[pulumi.Resource] = []
        if objects.network_policy is not None:
            job_dependencies.append(
                JobNetwork(f"{name}-network", objects.network_policy, opts=child)
            )
        if objects.pull_secret is not None:
            job_dependencies.append(
                StackSecret(f"{name}-registry", objects.pull_secret, opts=child)
            )
        if objects.env_secret is not None:
            job_dependencies.append(
                StackSecret(f"{name}-environment", objects.env_secret, opts=child)
            )
        if objects.storage_secret is not None:
            job_dependencies.append(
                StackSecret(f"{name}-storage-credentials", objects.storage_secret, opts=child)
            )
        claim: pulumi.Output[str | None] = pulumi.Output.from_input(None)
        if (claim_name := settings.checkpoint_claim) is not None:  # else nothing to mount
            volume = CheckpointVolume(
                f"{name}-checkpoints",
                claim_name,
                objects.claim,
                retain=settings.checkpoints.backend.retains_claim(settings.checkpoints),
                opts=child,
            )
            job_dependencies.append(volume)
            claim = volume.claim_name
        if objects.pod_monitor is not None:
            job_dependencies.append(JobMetrics(f"{name}-metrics", objects.pod_monitor, opts=child))
        api = api_of_settings(settings)
        job = job_component(api)(
            f"{name}-job",
            JobArgs(
                settings.job,
                objects,
                settings.kube_context,
                job_dependencies,
                rank0=api.rank0_pod(settings),
            ),
            opts=child,
        )
        return image.image_ref, claim, job.job_name


# The component's outputs, as the component provider host reads them (its annotations): the stack
# outputs, declared once in StackOutputs.
TrainingEnvironment.__annotations__ = {field.name: field.type for field in fields(StackOutputs)}
