"""TrainingEnvironment: the whole training run (image, credential, claim, job) as one component.

It owns the one explicit Kubernetes provider (and the Docker provider when it builds): the stack
files disable the default providers, so nothing can land in whatever cluster the ambient kubeconfig
happens to point at.
"""

from __future__ import annotations

import shlex

import pulumi
import pulumi_docker as docker
import pulumi_kubernetes as k8s

from components.checkpoint_volume import CheckpointVolume
from components.manifests import resource_names
from components.pytorch_job import PyTorchJob
from components.registry_credential import RegistryCredential
from components.settings import StackSettings
from components.training_image import TrainingImage


def kubectl(settings: StackSettings, *args: str) -> str:
    """A ready-to-paste kubectl command against the stack's context and namespace."""
    words = ["kubectl"]
    if settings.kube_context is not None:
        words += ["--context", settings.kube_context]
    words += ["--namespace", settings.namespace, *args]
    return shlex.join(words)


class TrainingEnvironment(pulumi.ComponentResource):
    """Composes TrainingImage, RegistryCredential, CheckpointVolume and PyTorchJob."""

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
        child = pulumi.ResourceOptions(parent=self)
        kubernetes = k8s.Provider(
            f"{name}-kubernetes",
            context=settings.kube_context,
            namespace=settings.namespace,
            # Server-side apply lets the operator and Run:ai own the fields they add to the job
            # without Pulumi fighting them on every update.
            enable_server_side_apply=True,
            opts=child,
        )
        docker_provider = (
            docker.Provider(f"{name}-docker", opts=child) if settings.image.build else None
        )
        registry = settings.registry
        image = TrainingImage(
            f"{name}-image",
            settings.image,
            registry,
            docker_provider=docker_provider,
            opts=child,
        )
        job_dependencies: list[pulumi.Resource] = []
        if registry is not None:
            credential = RegistryCredential(
                f"{name}-registry",
                settings,
                password=registry.password,
                provider=kubernetes,
                opts=child,
            )
            job_dependencies.append(credential)
        volume = CheckpointVolume(f"{name}-checkpoints", settings, provider=kubernetes, opts=child)
        job_dependencies.append(volume)
        job = PyTorchJob(
            f"{name}-job",
            settings,
            image=image.image_ref,
            provider=kubernetes,
            depends_on=job_dependencies,
            opts=child,
        )

        names = resource_names(settings)
        master_pod = f"{names.job}-master-0"  # the operator names pods <job>-<type>-<index>
        self.namespace = pulumi.Output.from_input(settings.namespace)
        self.job_name = job.job_name
        self.image_ref = image.image_ref
        self.claim_name = volume.claim_name
        self.checkpoint_path = pulumi.Output.from_input(settings.checkpoint_dir)
        self.logs_command = pulumi.Output.from_input(
            kubectl(settings, "logs", "--follow", f"pod/{master_pod}")
        )
        self.status_command = pulumi.Output.from_input(
            kubectl(settings, "get", f"pytorchjobs.kubeflow.org/{names.job}", "--watch")
        )
        self.checkpoint_command = pulumi.Output.from_input(
            kubectl(
                settings,
                "exec",
                f"pod/{master_pod}",
                "--",
                "python",
                "-m",
                "trainer.checkpoint",
                settings.checkpoint_dir,
            )
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
