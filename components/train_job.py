"""TrainJob: Kubeflow Trainer v2's training job (trainer.kubeflow.org/v1alpha1) and the
TrainingRuntime it runs on when the stack declares one (builders/job_apis/trainjob.py).

Like a PyTorchJob, the TrainJob is replaced (deleted first, its name is fixed) on any change of
its spec: Trainer makes `runtimeRef`, `trainer` and the runtime patches immutable, and a finished
TrainJob never runs again. The stack's TrainingRuntime is named after a digest of its spec, so a
change of restart policy creates a new runtime and, through `runtimeRef`, replaces the TrainJob;
Pulumi deletes the old runtime last, once the TrainJob that used it is gone.

With `job.waitFor` running or succeeded, the same resource hooks as a PyTorchJob's
(components/job_outcome.py, through components/watched_job.py) keep `pulumi up` until the job
runs or ends.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.watched_job import JobArgs, watched_job


class TrainJob(pulumi.ComponentResource):
    """The TrainJob (`numNodes` pods, rank 0 the first), with the checkpoint storage mounted
    where it is a volume, and its TrainingRuntime (the stack objects' `runtime`: None when it
    runs on the cluster's ClusterTrainingRuntime). Built from `JobArgs`."""

    job_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: JobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("pytorch-distributed:index:TrainJob", name, None, opts)
        dependencies = list(args.depends_on)
        self.runtime: k8s.apiextensions.CustomResource | None = None
        runtime = args.objects.runtime
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
            args.job,
            args.objects.job,
            kube_context=args.kube_context,
            depends_on=dependencies,
            parent=self,
            runtime=runtime,
            rank0=args.rank0,
        )
        self.register_outputs({"jobName": self.job_name})
