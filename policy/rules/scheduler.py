"""Who decides when a job's pods start. On NVIDIA Run:ai every pod goes through `runai-scheduler`;
with the default scheduler the pods bypass the project's GPU quota and gang scheduling, so one
replica can start while the others wait forever holding their GPUs. On any shared cluster a job
goes through a queue (Kueue, Run:ai's, KAI's), which admits all its pods at once or none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .jobs import job_view
from .model import TRAINJOB_TYPE, dig, is_unknown, metadata_namespace

RUNAI_SCHEDULER: Final = "runai-scheduler"
PLATFORMS: Final = ("kubeflow", "runai")
# The job's label that names its queue, per scheduler: Kueue's LocalQueue (stack setting
# job.queue), Run:ai's project queue (runaiProject), the KAI scheduler's queue.
QUEUE_LABELS: Final = ("kueue.x-k8s.io/queue-name", "runai/queue", "kai.scheduler/queue")


def is_runai_stack(props: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """The stack's platform as the policy config states it, or else as the namespace shows it
    (the program puts Run:ai jobs in the project's `runai-<project>` namespace)."""
    platform = config.get("platform")
    if platform in PLATFORMS:
        return platform == "runai"
    namespace = metadata_namespace(props)
    return isinstance(namespace, str) and namespace.startswith("runai-")


def runai_scheduler(
    resource_type: str, props: Mapping[str, Any], config: Mapping[str, Any]
) -> list[str]:
    view = job_view(resource_type)
    if view is None or not is_runai_stack(props, config):
        return []
    if resource_type == TRAINJOB_TYPE:
        return [
            "a TrainJob on a Run:ai stack: Run:ai schedules PyTorchJob (kubeflow.org/v1) but "
            "not Trainer v2's TrainJob, whose pods could not be given runai-scheduler (a "
            "runtime patch cannot set schedulerName); use job.api: pytorchjob"
        ]
    messages: list[str] = []
    for pod in view.pod_specs(props):
        scheduler = dig(pod.spec, "schedulerName")
        if is_unknown(scheduler) or scheduler == RUNAI_SCHEDULER:
            continue
        shown = "not set" if scheduler is None else repr(scheduler)
        messages.append(
            f"{pod.path}.schedulerName is {shown}; "
            f"pods on a Run:ai stack must use {RUNAI_SCHEDULER!r}"
        )
    return messages


def job_names_a_queue(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if job_view(resource_type) is None:
        return []
    labels = dig(props, "metadata", "labels")
    if is_unknown(labels) or (
        isinstance(labels, Mapping) and any(label in labels for label in QUEUE_LABELS)
    ):
        return []
    return [
        "the job names no queue, so on a shared cluster its pods compete one by one and a "
        "half-started job holds its GPUs: set job.queue (a Kueue LocalQueue, label "
        f"{QUEUE_LABELS[0]}), or label it for your scheduler ({', '.join(QUEUE_LABELS[1:])})"
    ]
