"""The before-create hook of a job whose operator would adopt what the previous job of the same
name left running (a TrainJob: `JobApi.run_object`).

Why: such a job is deleted in the background (see builders/job_apis/trainjob.py for why not in
the foreground), so its delete returns at once and the garbage collector removes its JobSet, Jobs
and pods after. The job's name is fixed; made again under it meanwhile (the replacement of a
changed TrainJob, or `make up` right after `make destroy`), Trainer would apply its JobSet onto the
old one, still there, and the old run's pods would go on beside the new run's, writing to the same
checkpoint directory. So the create waits until the old run object and the pods of the job's
name are gone: at once when there were none, seconds after a delete (the pods' grace period).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi

from builders.job_apis import api_of_kind
from readers.job_watch import JobWatchError, api_client, api_errors

# Well beyond the pods' grace period (TERMINATION_GRACE_SECONDS) and the garbage collector's pace.
DRAIN_TIMEOUT_SECONDS = 10 * 60
POLL_SECONDS = 1.0
PROGRESS_SECONDS = 30.0


class PreviousRunError(RuntimeError):
    """The previous job's run is still there after the timeout, or cannot be read."""


@dataclass(frozen=True)
class PreviousRun:
    """What a job named `name` in `namespace` would find left by its predecessor."""

    namespace: str
    name: str
    kind: str
    kube_context: str | None

    def leftovers(self, api: Any) -> list[str]:
        """The previous run's object and pods still there, as `kind/name` ([] when none)."""
        from kubernetes import client
        from kubernetes.client import ApiException

        job_api = api_of_kind(self.kind)
        found: list[str] = []
        if job_api.run_object is not None:
            group, version, plural = job_api.run_object
            try:
                client.CustomObjectsApi(api).get_namespaced_custom_object(
                    group, version, self.namespace, plural, self.name
                )
                found.append(f"{plural}/{self.name}")
            except ApiException as error:
                if error.status != 404:
                    raise
        pods = client.CoreV1Api(api).list_namespaced_pod(
            self.namespace, label_selector=job_api.pod_selector(self.name)
        )
        found.extend(f"pods/{pod.metadata.name}" for pod in pods.items)
        return found

    def read(self) -> Callable[[], list[str]]:
        """`leftovers` through the kubeconfig context the stack's provider uses."""
        try:
            api = api_client(self.kube_context)
        except JobWatchError as error:
            raise PreviousRunError(f"{self.title}: {error}") from None
        return lambda: self.leftovers(api)

    def wait_gone(
        self,
        read: Callable[[], list[str]],
        log: Callable[[str], None],
        *,
        timeout: float = DRAIN_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Return once `read` finds nothing of the previous run; raise PreviousRunError after
        `timeout` seconds, naming what is left and what to do."""
        start = clock()
        reported = None
        while True:
            try:
                left = read()
            except api_errors() as error:
                # An ApiException's own text spans lines (status, reason, headers, body).
                why = f"{error.status} {error.reason}" if hasattr(error, "status") else error
                raise PreviousRunError(
                    f"{self.title}: cannot read what the previous run left ({why}); the job "
                    "was not created, `make up` tries again"
                ) from None
            if not left:
                return
            waited = clock() - start
            if waited >= timeout:
                raise PreviousRunError(
                    f"{self.title}: the previous {self.kind} of this name was deleted, but after "
                    f"{int(waited)}s its run is still there ({', '.join(left)}); creating the new "
                    "one now would adopt it. Find what holds it (a finalizer, a node that is "
                    f"gone: `kubectl describe -n {self.namespace} {left[0]}`), then run "
                    "`make up` again"
                )
            if reported is None or waited - reported >= PROGRESS_SECONDS:
                reported = waited
                log(
                    f"{self.title}: waiting for the previous run to be gone before creating "
                    f"the new one ({', '.join(left)})"
                )
            sleep(POLL_SECONDS)

    @property
    def title(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class PreviousRunHook:
    """The job's before-create hook: `hook` goes into its ResourceHookBinding."""

    def __init__(self, name: str, previous: PreviousRun) -> None:
        self.previous = previous
        self.hook = pulumi.ResourceHook(f"{name}-previous-run", self._before)

    async def _before(self, args: pulumi.ResourceHookArgs) -> None:
        loop = asyncio.get_running_loop()

        def log(message: str) -> None:
            loop.call_soon_threadsafe(pulumi.log.info, message)

        # The Kubernetes client blocks: the wait runs in a thread, so the program's event loop
        # (other resources, the engine's callbacks) goes on meanwhile. An error from a
        # before-create hook fails the create, with the message, and the job is not made.
        previous = self.previous
        await asyncio.to_thread(lambda: previous.wait_gone(previous.read(), log))
