"""PyTorchJob: the kubeflow.org/v1 training job, replaced whenever its spec changes.

Why replacement: the training operator never re-runs a finished job and never rebuilds running
pods when the template changes, so an in-place update would silently do nothing. Any change under
`spec` (image digest, replicas, arguments, resources) therefore deletes the old job and creates a
new one (`delete_before_replace`, since the name is fixed). Checkpoints live on the claim (or in
the bucket), so the new job resumes from the last one. A change of `job.queue` or
`job.priorityClass` replaces it too: Kueue's webhook refuses to change the labels a job was
admitted by.

Before the job is created, a hook asks the API server whether the namespace admits its pods
(components/pod_admission.py: a namespace that enforces Pod Security "restricted" refuses a
`job.runAsRoot` job's pods) and fails `pulumi up` with the API server's reason when it does not.
With `job.waitFor` running or succeeded, the job's resource hooks (components/job_outcome.py) keep
`pulumi up` until the job runs or ends, and fail it when the job fails. All of that is the job's
resource as every job API's component declares it (components/watched_job.py).
"""

from __future__ import annotations

import pulumi

from components.watched_job import JobArgs, watched_job


class PyTorchJob(pulumi.ComponentResource):
    """One master that trains plus `nodes - 1` workers, with the checkpoint storage mounted
    where it is a volume. Built from `JobArgs`, as every job API's component is (see
    components/training_environment.py `job_component`)."""

    job_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: JobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("pytorch-distributed:index:PyTorchJob", name, None, opts)
        self.job, self.job_name = watched_job(
            name,
            args.job,
            args.objects.job,
            kube_context=args.kube_context,
            depends_on=args.depends_on,
            parent=self,
            rank0=args.rank0,
        )
        self.register_outputs({"jobName": self.job_name})
