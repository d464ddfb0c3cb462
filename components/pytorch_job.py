"""PyTorchJob: the kubeflow.org/v1 training job, replaced whenever its spec changes.

Why replacement: the training operator never re-runs a finished job and never rebuilds running
pods when the template changes, so an in-place update would silently do nothing. Any change under
`spec` (image digest, replicas, arguments, resources) therefore deletes the old job and creates a
new one (`delete_before_replace`, since the name is fixed). Checkpoints live on the claim, so the
new job resumes from the last one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


class PyTorchJob(pulumi.ComponentResource):
    """One master that trains plus `nodes - 1` workers, with the checkpoint claim mounted.

    `manifest` is the job from `stack_objects`; the Kubernetes provider comes from the parent's
    `providers`. `hooks` run after the job's create and update (`job_wait.wait_hooks`: the wait
    for `job.waitFor: running`).
    """

    job_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        manifest: Mapping[str, Any],
        *,
        depends_on: Sequence[pulumi.Resource] = (),
        hooks: pulumi.ResourceHookBinding | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:PyTorchJob", name, None, opts)
        self.job = k8s.apiextensions.CustomResource(
            f"{name}-job",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(depends_on),
                replace_on_changes=["spec"],
                delete_before_replace=True,
                hooks=hooks,
            ),
        )
        self.job_name = pulumi.Output.from_input(manifest["metadata"]["name"])
        self.register_outputs({"jobName": self.job_name})
