"""The cluster stack: creates the training namespace on the cluster and exports what a training
stack reads through a StackReference (examples/stack-references/training).

A real platform program would create the cluster, its registry and its storage here; this one
takes their coordinates from its config. The kubeconfig and the registry password stay secrets
from the config to the outputs: a StackReference hands them to the training stack as secrets.
"""

import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config()
kubeconfig = config.require_secret("kubeconfig")
cluster = k8s.Provider("cluster", kubeconfig=kubeconfig, enable_server_side_apply=True)
namespace = k8s.core.v1.Namespace(
    "training",
    metadata={"name": config.require("namespace")},
    opts=pulumi.ResourceOptions(provider=cluster),
)

pulumi.export("kubeconfig", kubeconfig)
pulumi.export("namespace", namespace.metadata.apply(lambda metadata: metadata.name))
pulumi.export("registry", config.require("registry"))
pulumi.export("registryUsername", config.require("registryUsername"))
pulumi.export("registryPassword", config.require_secret("registryPassword"))
pulumi.export("storageClass", config.require("storageClass"))
