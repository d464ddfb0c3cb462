"""The training stack: the cluster stack's outputs (kubeconfig, namespace, registry, storage
class) through a StackReference, the training environment from typed arguments.

The kubeconfig and the registry password arrive as secret Outputs and stay secrets: the provider
takes the kubeconfig as it is, the component keeps the password secret into the pull Secret.
Arguments that are Outputs are known once the cluster stack's outputs are read, which `pulumi
preview` does too, so the preview shows every object.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.training_environment import TrainingEnvironment
from settings.args import (
    CheckpointArgs,
    ImageArgs,
    JobArgs,
    RegistryArgs,
    TrainingEnvironmentArgs,
)

config = pulumi.Config()
platform = pulumi.StackReference(config.require("clusterStack"))
namespace = platform.require_output("namespace")
registry = platform.require_output("registry")

cluster = k8s.Provider(
    "cluster",
    kubeconfig=platform.require_output("kubeconfig"),
    namespace=namespace,
    enable_server_side_apply=True,
)

environment = TrainingEnvironment(
    "training",
    TrainingEnvironmentArgs(
        namespace=namespace,
        image=ImageArgs(
            build=False, ref=pulumi.Output.concat(registry, "/", config.require("image"))
        ),
        registry=RegistryArgs(
            server=registry,
            username=platform.require_output("registryUsername"),
            password=platform.require_output("registryPassword"),
        ),
        checkpoints=CheckpointArgs(
            size="1Gi",
            storage_class=platform.require_output("storageClass"),
            access_mode="ReadWriteOnce",
            retain_on_destroy=False,
        ),
        job=JobArgs(
            name="referenced-ddp",
            nodes=2,
            gpus_per_node=0,
            total_epochs=4,
            save_every=2,
            dataset_size=1024,
            cpu="1",
            memory="2Gi",
            restart_policy="OnFailure",
        ),
    ),
    opts=pulumi.ResourceOptions(providers=[cluster]),
)

pulumi.export("jobName", environment.job_name)
pulumi.export("image", environment.image)
pulumi.export("logsCommand", environment.logs_command)
