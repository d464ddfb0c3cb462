"""A platform team's program: its own Kubernetes provider, and a training environment built from
typed arguments (docs/how-to/use-the-component.md).

The component validates the arguments as this repository's stack validates its config, so a bad
value stops `pulumi preview` with a line naming it. The image is prebuilt and pinned by digest:
a program outside this repository has no trainer/ to build.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.training_environment import TrainingEnvironment
from settings.args import (
    CheckpointArgs,
    ImageArgs,
    JobArgs,
    TrainingEnvironmentArgs,
)

config = pulumi.Config()
# The program's own provider: the component uses it instead of creating one (its children
# inherit it through `providers`).
cluster = k8s.Provider(
    "cluster",
    context=config.get("kubeContext"),
    namespace="default",
    enable_server_side_apply=True,
)

environment = TrainingEnvironment(
    "training",
    TrainingEnvironmentArgs(
        namespace="default",
        image=ImageArgs(
            build=False,
            ref="ghcr.io/example/pytorch-distributed-trainer@sha256:" + "0" * 64,
        ),
        checkpoints=CheckpointArgs(
            size="1Gi", access_mode="ReadWriteOnce", retain_on_destroy=False
        ),
        job=JobArgs(
            name="platform-ddp",
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
pulumi.export("logsCommand", environment.logs_command)
pulumi.export("checkpointPath", environment.checkpoint_path)
