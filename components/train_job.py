"""TrainJob: Kubeflow Trainer v2's training job (trainer.kubeflow.org/v1alpha1) and the
TrainingRuntime it runs on when the stack declares one (components/job_apis/trainjob.py).

Like a PyTorchJob, the TrainJob is replaced (deleted first, its name is fixed) on any change of
its spec: Trainer makes `runtimeRef`, `trainer` and the runtime patches immutable, and a finished
TrainJob never runs again. The stack's TrainingRuntime is named after a digest of its spec, so a
change of restart policy creates a new runtime and, through `runtimeRef`, replaces the TrainJob;
Pulumi deletes the old runtime last, once the TrainJob that used it is gone.

With `job.waitFor` running or succeeded, the same resource hooks as a PyTorchJob's
(components/job_outcome.py) keep `pulumi up` until the job runs or ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.pytorch_job import watched_job
from components.settings import JobSettings
from components.stack_objects import StackObjects


class TrainJob(pulumi.ComponentResource):
    """The TrainJob (`numNodes` pods, rank 0 the first), with the checkpoint claim mounted (none:
    s3), and
    its TrainingRuntime (`runtime`: None when it runs on the cluster's ClusterTrainingRuntime)."""

    job_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        job: JobSettings,
        objects: StackObjects,
        *,
        kube_context: str | None,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:TrainJob", name, None, opts)
        dependencies = list(depends_on)
        self.runtime: k8s.apiextensions.CustomResource | None = None
        runtime = objects.runtime
        if runtime is not None:
            self.runtime = k8s.apiextensions.CustomResource(
                f"{name}-runtime",
                api_version=runtime["apiVersion"],
                kind=runtime["kind"],
                metadata=runtime["metadata"],
                spec=runtime["spec"],
                opts=pulumi.ResourceOptions(parent=self),
            )
            dependencies.append(self.runtime)
        self.job, self.job_name = watched_job(
            name,
            job,
            objects.job,
            kube_context=kube_context,
            depends_on=dependencies,
            parent=self,
            runtime=runtime,
        )
        self.register_outputs({"jobName": self.job_name})
