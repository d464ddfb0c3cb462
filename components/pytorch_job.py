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

from components.settings import JobSettings

# With waitFor "running", `pulumi up` waits until every pod runs; pulling a multi-GB CUDA image
# onto fresh GPU nodes can take far longer than the provider's default.
RUNNING_TIMEOUT = "30m"


class PyTorchJob(pulumi.ComponentResource):
    """One master that trains plus `nodes - 1` workers, with the checkpoint claim mounted.

    `manifest` is the job from `stack_objects`; the Kubernetes provider comes from the parent's
    `providers`.
    """

    job_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        job: JobSettings,
        manifest: Mapping[str, Any],
        *,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:PyTorchJob", name, None, opts)
        timeouts = None
        if job.wait_for == "running":
            timeouts = pulumi.CustomTimeouts(create=RUNNING_TIMEOUT, update=RUNNING_TIMEOUT)
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
                custom_timeouts=timeouts,
            ),
        )
        self.job_name = pulumi.Output.from_input(manifest["metadata"]["name"])
        self.register_outputs({"jobName": self.job_name})
