"""What `pulumi up` waits for once the job is created or updated, and what stops the wait early.

pulumi-kubernetes 4.25 can wait on a custom resource until a condition holds
(`pulumi.com/waitFor`), but cannot give up before its timeout: a job whose pods can never start
(an image the node cannot pull, a missing Secret) never gets its Running condition, and
`pulumi up` would sit there for the 30-minute timeout and then say only that it timed out. So with
`job.waitFor: running` the job is created without the provider's await, and a resource hook
after its create and update (`wait_hooks`) watches the job and its pods instead: it returns once
the job is Running or Succeeded, and fails `pulumi up` as soon as the kubelet reports that a
pod's container cannot start, or the operator marks the job Failed, with their reasons. The job
stays created (the hook runs after the step): fix the cause and `pulumi up` again.

The decision is a pure function of the job and its pods as the API returns them (`job_outcome`),
so it is tested without a cluster; the hook only polls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from components.settings import StackSettings

# Pulling a multi-GB CUDA image onto fresh GPU nodes can take this long.
RUNNING_TIMEOUT_S = 30 * 60
POLL_INTERVAL_S = 2.0
REACHED = frozenset({"Running", "Succeeded"})
# A container waiting for one of these will not start without a change (the kubelet retries
# pulls with a growing back-off, but a wrong credential or reference stays wrong).
START_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
JOB_LABEL = "training.kubeflow.org/job-name"


class JobWaitError(RuntimeError):
    """The job cannot reach what `job.waitFor` asks for; the message says why."""


@dataclass(frozen=True)
class Outcome:
    """`reached`: the wait is over; `failure`: why it never will be (then `reached` is False)."""

    reached: bool
    failure: str | None = None


def _true_conditions(job: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return {c["type"]: c for c in conditions if c.get("status") == "True"}


def pod_start_failures(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per container the kubelet cannot start: pod, container, reason, message."""
    lines = []
    for pod in pods:
        status = pod.get("status") or {}
        for container in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in START_FAILURES:
                message = waiting.get("message") or "no message"
                lines.append(
                    f"pod {pod['metadata']['name']} container {container['name']}: "
                    f"{waiting['reason']}: {message}"
                )
    return lines


def job_outcome(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], wanted: frozenset[str] = REACHED
) -> Outcome:
    """Whether the job reached one of the `wanted` conditions, never will, or may yet."""
    name = job["metadata"]["name"]
    conditions = _true_conditions(job)
    if wanted & conditions.keys():
        return Outcome(reached=True)
    if failed := conditions.get("Failed"):
        reason = failed.get("reason") or "Failed"
        return Outcome(False, f"job {name} failed: {reason}: {failed.get('message', '')}".strip())
    if failures := pod_start_failures(pods):
        return Outcome(False, f"job {name}: a pod cannot start:\n  " + "\n  ".join(failures))
    return Outcome(reached=False)


def _read(settings: StackSettings, api: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from kubernetes import client

    namespace, name = settings.namespace, settings.job.name
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", name
    )
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{JOB_LABEL}={name}"
    )
    return job, api.sanitize_for_serialization(pods)["items"]


def _api_client(settings: StackSettings) -> Any:
    """The cluster the stack's provider talks to: the ambient kubeconfig and the stack's context
    (in a pod without a kubeconfig, the pod's service account)."""
    from kubernetes import config

    try:
        return config.new_client_from_config(context=settings.kube_context)
    except config.ConfigException:
        config.load_incluster_config()
        from kubernetes import client

        return client.ApiClient()


async def wait_for_job(settings: StackSettings, timeout: float = RUNNING_TIMEOUT_S) -> None:
    """Poll until the job is Running or Succeeded; JobWaitError when it cannot get there."""
    api = await asyncio.to_thread(_api_client, settings)
    deadline = time.monotonic() + timeout
    while True:
        job, pods = await asyncio.to_thread(_read, settings, api)
        outcome = job_outcome(job, pods)
        if outcome.reached:
            return
        if outcome.failure is not None:
            raise JobWaitError(outcome.failure)
        if time.monotonic() > deadline:
            raise JobWaitError(
                f"job {settings.job.name}: neither Running nor Succeeded after {timeout:.0f}s"
            )
        await asyncio.sleep(POLL_INTERVAL_S)


def wait_hooks(settings: StackSettings) -> pulumi.ResourceHookBinding | None:
    """The job's hooks: for `job.waitFor: running`, wait after create and after update."""
    if settings.job.wait_for != "running":
        return None

    async def wait_for_running(_args: pulumi.ResourceHookArgs) -> None:
        await wait_for_job(settings)

    hook = pulumi.ResourceHook(f"{settings.job.name}-wait-for-running", wait_for_running)
    return pulumi.ResourceHookBinding(after_create=[hook], after_update=[hook])
