"""TrainingEnvironment: the whole training run (image, credential, claim, job) as one component.

It owns the one explicit Kubernetes provider (and the Docker provider when it builds) and hands
them to its children as `providers`, which every resource under them inherits through `parent=`:
the stack files disable the default providers, so nothing can land in whatever cluster the ambient
kubeconfig happens to point at. Which children exist follows `stack_objects`, as the render does.
"""

from __future__ import annotations

import shlex

import pulumi
import pulumi_docker as docker
import pulumi_kubernetes as k8s

from components.checkpoint_volume import CheckpointVolume
from components.job_apis import api_of_settings
from components.manifests import resource_names, stack_objects
from components.pytorch_job import PyTorchJob
from components.registry_credential import RegistryCredential
from components.settings import StackSettings
from components.train_job import TrainJob
from components.training_image import TrainingImage, registry_auth


def kubectl(settings: StackSettings, *args: str) -> str:
    """A ready-to-paste kubectl command against the stack's context and namespace."""
    words = ["kubectl"]
    if settings.kube_context is not None:
        words += ["--context", settings.kube_context]
    words += ["--namespace", settings.namespace, *args]
    return shlex.join(words)


class TrainingEnvironment(pulumi.ComponentResource):
    """Composes TrainingImage, RegistryCredential, CheckpointVolume and the job: a PyTorchJob or a
    TrainJob, as `job.api` says."""

    namespace: pulumi.Output[str]
    job_name: pulumi.Output[str]
    image_ref: pulumi.Output[str]
    claim_name: pulumi.Output[str]
    checkpoint_path: pulumi.Output[str]
    logs_command: pulumi.Output[str]
    status_command: pulumi.Output[str]
    checkpoint_command: pulumi.Output[str]

    def __init__(
        self, name: str, settings: StackSettings, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("pytorch-distributed:index:TrainingEnvironment", name, None, opts)
        own = pulumi.ResourceOptions(parent=self)
        providers: list[pulumi.ProviderResource] = [
            k8s.Provider(
                f"{name}-kubernetes",
                context=settings.kube_context,
                namespace=settings.namespace,
                # Server-side apply lets the operator and Run:ai own the fields they add to the job
                # without Pulumi fighting them on every update.
                enable_server_side_apply=True,
                opts=own,
            )
        ]
        if settings.image.build:
            # The engine comes from DOCKER_HOST (or its default socket) where `pulumi up` runs;
            # the registry credentials serve the lookup of the pushed image's digest.
            auth = registry_auth(settings.image, settings.registry)
            providers.append(
                docker.Provider(f"{name}-docker", registry_auth=auth or None, opts=own)
            )
        # Every child and each of its resources (parent=self) resolve their provider from this
        # map, by package: none can fall back to a default provider.
        child = pulumi.ResourceOptions(parent=self, providers=providers)
        image = TrainingImage(f"{name}-image", settings.image, settings.registry, opts=child)
        registry = settings.registry
        objects = stack_objects(
            settings,
            image=image.image_ref,
            # Secret even if a caller hands in a plain value: state only ever holds `[secret]`.
            password=None if registry is None else pulumi.Output.secret(registry.password),
        )
        job_dependencies: list[pulumi.Resource] = []
        if objects.pull_secret is not None:
            job_dependencies.append(
                RegistryCredential(f"{name}-registry", objects.pull_secret, opts=child)
            )
        volume = CheckpointVolume(
            f"{name}-checkpoints", settings.checkpoints, objects.claim, opts=child
        )
        job_dependencies.append(volume)
        job: PyTorchJob | TrainJob
        if settings.job.api == "trainjob":
            job = TrainJob(
                f"{name}-job",
                settings.job,
                objects.job,
                objects.runtime,
                kube_context=settings.kube_context,
                depends_on=job_dependencies,
                opts=child,
            )
        else:
            job = PyTorchJob(
                f"{name}-job",
                settings.job,
                objects.job,
                kube_context=settings.kube_context,
                depends_on=job_dependencies,
                opts=child,
            )

        names = resource_names(settings)
        api = api_of_settings(settings)
        self.namespace = pulumi.Output.from_input(settings.namespace)
        self.job_name = job.job_name
        self.image_ref = image.image_ref
        self.claim_name = volume.claim_name
        self.checkpoint_path = pulumi.Output.from_input(settings.checkpoint_dir)
        self.logs_command = pulumi.Output.from_input(kubectl(settings, *api.logs_args(settings)))
        self.status_command = pulumi.Output.from_input(
            kubectl(settings, "get", api.status_resource(names.job), "--watch")
        )
        # The job's pods may be gone when the checkpoints are wanted (finished, cleaned up,
        # destroyed): tools/retrieve.py reads the claim through a pod of its own.
        self.checkpoint_command = pulumi.Output.from_input(
            shlex.join(["make", "checkpoint", f"STACK={pulumi.get_stack()}"])
        )
        self.register_outputs(
            {
                "namespace": self.namespace,
                "jobName": self.job_name,
                "imageRef": self.image_ref,
                "claimName": self.claim_name,
                "checkpointPath": self.checkpoint_path,
                "logsCommand": self.logs_command,
                "statusCommand": self.status_command,
                "checkpointCommand": self.checkpoint_command,
            }
        )
