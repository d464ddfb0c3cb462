"""A program in Python that reaches TrainingEnvironment through the component package, as one in
any other language does: `pulumi package add ../../provider` generated its SDK
(`pulumi_pytorch_distributed`), and the component runs in the package's provider, not in this
process. The same values as examples/platform-program, which imports the components instead.
"""

import pulumi
import pulumi_kubernetes as k8s
import pulumi_pytorch_distributed as pytorch_distributed

cluster = k8s.Provider("cluster", namespace="default", enable_server_side_apply=True)

training = pytorch_distributed.TrainingEnvironment(
    "training",
    namespace="default",
    # Prebuilt and pinned by digest: a program outside this repository has no trainer/ to build.
    image={"build": False, "ref": "ghcr.io/example/pytorch-distributed-trainer@sha256:" + "0" * 64},
    checkpoints={"size": "1Gi", "access_mode": "ReadWriteOnce", "retain_on_destroy": False},
    job={
        "name": "platform-ddp",
        "nodes": 2,
        "gpus_per_node": 0,
        "total_epochs": 4,
        "save_every": 2,
        "dataset_size": 1024,
        "cpu": "1",
        "memory": "2Gi",
        "restart_policy": "OnFailure",
    },
    opts=pulumi.ResourceOptions(providers=[cluster]),
)

pulumi.export("jobName", training.job_name)
pulumi.export("logsCommand", training.logs_command)
pulumi.export("checkpointPath", training.checkpoint_path)
