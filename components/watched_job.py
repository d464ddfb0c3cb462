"""The job's custom resource as every job API's component declares it (components/pytorch_job.py,
components/train_job.py): replaced on any change of its spec, its pods' admission checked before
it is created, and watched to its outcome when `job.waitFor` asks.

Why replacement: neither the training operator nor Kubeflow Trainer re-runs a finished job or
rebuilds running pods when the template changes, so an in-place update would silently do
nothing. Any change under `spec` (image digest, replicas, arguments, resources) therefore deletes
the old job and creates a new one (`delete_before_replace`, since the name is fixed). Checkpoints
live on the claim (or in the bucket), so the new job resumes from the last one. A change of
`job.queue` or `job.priorityClass` replaces it too: Kueue's webhook refuses to change the labels
a job was admitted by.

Before the job is created, a hook asks the API server whether the namespace admits its pods
(components/pod_admission.py: a namespace that enforces Pod Security "restricted" refuses a
`job.runAsRoot` job's pods) and fails `pulumi up` with the API server's reason when it does not;
a job API whose runs outlive the job object has its previous run looked at too
(components/previous_run.py). With `job.waitFor` running or succeeded, the job's resource hooks
(components/job_outcome.py) keep `pulumi up` until the job runs or ends, and fail it when the
job fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from builders.job_apis import api_of_kind
from builders.manifests import KUEUE_ADMISSION_LABELS
from builders.stack_objects import StackObjects
from components.job_outcome import WAITING_MODES, JobOutcome, WaitTarget
from components.pod_admission import PodAdmission, PodAdmissionHook
from components.previous_run import PreviousRun, PreviousRunHook
from settings.stack import JobSettings

# What replaces the job instead of updating it: its spec, and the labels Kueue admitted it by.
REPLACE_ON_CHANGES = ("spec", *(f'metadata.labels["{label}"]' for label in KUEUE_ADMISSION_LABELS))


@dataclass(frozen=True)
class JobArgs:
    """What every job API's component is built from (components/training_environment.py's
    `JobComponent`): the job's settings, the stack's objects (its job, and its runtime where it
    has one), the Kubernetes context the hooks watch the job through (the provider's own comes
    from the parent's `providers`), and what the job waits for (its Secrets, its claim)."""

    job: JobSettings
    objects: StackObjects
    kube_context: str | None
    depends_on: Sequence[pulumi.Resource] = ()
    rank0: str = ""  # rank 0's stable pod name (JobApi.rank0_pod), whose log holds the progress


def watched_job(
    name: str,
    job: JobSettings,
    manifest: Mapping[str, Any],
    *,
    kube_context: str | None,
    depends_on: Sequence[pulumi.Resource],
    parent: pulumi.Resource,
    runtime: Mapping[str, Any] | None = None,
    rank0: str = "",
) -> tuple[k8s.apiextensions.CustomResource, pulumi.Output[str]]:
    """The job's custom resource, replaced (delete first) on any change of its spec, its pods'
    admission checked before it is created (with `runtime`, the TrainingRuntime the stack
    declares for it), and watched by the hooks `job.waitFor` asks for; and its name, known once
    the hooks let it be (a failed job fails the program there). Shared by every job API's
    component."""
    metadata = manifest["metadata"]
    admission = PodAdmission(
        namespace=metadata["namespace"],
        name=metadata["name"],
        kind=manifest["kind"],
        kube_context=kube_context,
        runtime=runtime,
    )
    before_create: list[pulumi.ResourceHook] = [PodAdmissionHook(name, admission).hook]
    if api_of_kind(manifest["kind"]).run_object is not None:
        previous = PreviousRun(
            namespace=metadata["namespace"],
            name=metadata["name"],
            kind=manifest["kind"],
            kube_context=kube_context,
        )
        before_create.append(PreviousRunHook(name, previous).hook)
    outcome = None
    if job.wait_for in WAITING_MODES:
        target = WaitTarget(
            namespace=metadata["namespace"],
            job=metadata["name"],
            kube_context=kube_context,
            wait_for=job.wait_for,
            stack=pulumi.get_stack(),
            kind=manifest["kind"],
            running_timeout_seconds=job.running_timeout_seconds,
            rank0=rank0,
        )
        outcome = JobOutcome(name, target)
    after = [] if outcome is None else [outcome.hook]
    hooks = pulumi.ResourceHookBinding(
        before_create=before_create, after_create=after, after_update=after
    )
    resource = k8s.apiextensions.CustomResource(
        f"{name}-job",
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=metadata,
        spec=manifest["spec"],
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=list(depends_on),
            replace_on_changes=list(REPLACE_ON_CHANGES),
            delete_before_replace=True,
            hooks=hooks,
        ),
    )
    job_name = pulumi.Output.from_input(metadata["name"])
    if outcome is not None:
        # Known once the job is where job.waitFor wants it; a failed job fails the program.
        job_name = resource.urn.apply(lambda _: outcome.checked(metadata["name"]))
    return resource, job_name
