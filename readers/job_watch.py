"""A training job (PyTorchJob or TrainJob) and its pods read from the API server, waited on, and
followed.

Why here and not in the provider: pulumi-kubernetes 4.25 waits on a custom resource only for a
`pulumi.com/waitFor` condition and cannot fail when another one (Failed) becomes true, so the job's
resource hooks (components/job_outcome.py) and `make status` (tools/status.py) watch it
themselves, with the official Kubernetes client, through the kubeconfig and context the stack's
Kubernetes provider uses (KUBECONFIG, else ~/.kube/config; in a pod, its service account).

Waiting is a watch on the job object, so an operator's status update (Failed above all) is seen
within a second; pods are read again on every change of the job and at least every
WINDOW_SECONDS, since a pod stuck pulling its image changes nothing in the job.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from builders.job_apis import JobApi, api_of_kind
from readers.job_state import DEFAULT_KIND, LOG_LINES, JobState, Replica, job_state
from readers.progress_report import SCAN_LINES, ProgressReport, last_report, no_report, summary
from readers.queue_state import (
    JOB_UID_LABEL,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LOCAL_QUEUE_PLURAL,
    QUEUED_REMINDER_SECONDS,
    WORKLOAD_PLURAL,
    QueueState,
    newest_workload,
    queue_name,
    queue_state,
)

WINDOW_SECONDS = 20
# Consecutive failed reads of the API server before a wait gives up (a few minutes of retries).
MAX_API_ERRORS = 30
EVENTS_SHOWN = 10
# How often a wait reads rank 0's log for the training's progress (TrainingProgress).
PROGRESS_SECONDS = 15
NO_REPORT_GRACE_SECONDS = 90


class JobWatchError(RuntimeError):
    """The job cannot be watched (no kubeconfig, API server unreachable, job deleted)."""


class WaitTimeoutError(JobWatchError):
    def __init__(self, message: str, state: JobState) -> None:
        super().__init__(message)
        self.state = state


def api_errors() -> tuple[type[Exception], ...]:
    """What a call of the Kubernetes client raises when the API server fails or refuses."""
    from kubernetes.client import ApiException
    from urllib3.exceptions import HTTPError

    return ApiException, HTTPError, OSError


def api_error_reason(error: BaseException) -> str:
    """The API server's reason for a refusal in one line (its Status `message`, e.g. Pod
    Security's "violates PodSecurity ..."), else the error's own words."""
    body = getattr(error, "body", None)
    if body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            return " ".join(str(message).split())
    reason = getattr(error, "reason", None)
    return " ".join(str(reason or error).split())


# Where the one-machine cluster comes from, said after each error about a missing cluster: `make`
# runs a stack with this kubeContext (cluster/stacks.py) on it, starting it when needed.
LOCAL_CLUSTER = (
    "or, for the one-machine cluster, kubeContext: pytorch-distributed-local in the stack, as "
    "Pulumi.local.yaml has"
)


def kubeconfig_path() -> str:
    """The kubeconfig the Kubernetes provider reads: KUBECONFIG, else ~/.kube/config."""
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


def api_client(context: str | None) -> Any:
    """An ApiClient for `context` of the kubeconfig the Kubernetes provider would read."""
    from kubernetes import config

    kubeconfig = kubeconfig_path()
    exists = any(Path(p).expanduser().is_file() for p in kubeconfig.split(os.pathsep) if p)
    if not exists and not (context is None and os.environ.get("KUBERNETES_SERVICE_HOST")):
        raise JobWatchError(
            f"no kubeconfig at {kubeconfig}: set KUBECONFIG to your cluster's ({LOCAL_CLUSTER})"
        )
    try:
        if not exists:
            configuration = config.incluster_config.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            from kubernetes.client import ApiClient

            return ApiClient(configuration)
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (config.ConfigException, OSError, ValueError) as error:
        where = f"context {context!r} of " if context else ""
        raise JobWatchError(f"cannot load {where}kubeconfig {kubeconfig}: {error}") from None


def _root_cause(error: BaseException) -> BaseException:
    """The innermost reason of a urllib3 error (MaxRetryError -> NewConnectionError -> OSError)."""
    seen = error
    while True:
        inner = getattr(seen, "reason", None)
        if not isinstance(inner, BaseException) or inner is seen:
            inner = seen.__cause__ or seen.__context__
        if inner is None or inner is seen:
            return seen
        seen = inner


def describe_api_error(error: BaseException, api: Any) -> str:
    """One line for a failed call to the API server `api` talks to: unreachable (where and why,
    what to do), refused (the status), or the error's own words."""
    from kubernetes.client import ApiException

    server = getattr(getattr(api, "configuration", None), "host", "") or "?"
    if isinstance(error, ApiException):
        return f"the Kubernetes API server {server} answered {error.status} {error.reason}"
    cause = _root_cause(error)
    reason = getattr(cause, "strerror", None) or str(cause).rsplit(": ", 1)[-1]
    return (
        f"the Kubernetes API server {server} (kubeconfig {kubeconfig_path()}) cannot be "
        f"reached: {str(reason).lower()}; is the cluster up, and KUBECONFIG its kubeconfig? "
        f"({LOCAL_CLUSTER})"
    )


class JobWatch:
    """One job (namespace/name, of the API whose kind is `kind`) on one cluster."""

    def __init__(self, api: Any, namespace: str, name: str, kind: str = DEFAULT_KIND) -> None:
        from kubernetes import client

        self.namespace, self.name = namespace, name
        self.job_api: JobApi = api_of_kind(kind)
        self.title = f"{kind} {namespace}/{name}"
        self.api = api
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    @classmethod
    def connect(
        cls, context: str | None, namespace: str, name: str, kind: str = DEFAULT_KIND
    ) -> JobWatch:
        return cls(api_client(context), namespace, name, kind)

    # -- reading ----------------------------------------------------------------------------------

    def job(self) -> dict[str, Any] | None:
        from kubernetes.client import ApiException

        try:
            api = self.job_api
            job = self._custom.get_namespaced_custom_object(
                api.group, api.version, self.namespace, api.plural, self.name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return {"kind": self.job_api.kind, **job}

    def pods(self) -> list[dict[str, Any]]:
        response = self._core.list_namespaced_pod(
            self.namespace,
            label_selector=self.job_api.pod_selector(self.name),
            _preload_content=False,
        )
        return list(json.loads(response.data).get("items") or [])

    def queue(self, job: dict[str, Any]) -> QueueState | None:
        """Where Kueue has the job (its Workload, its LocalQueue), when it names a LocalQueue;
        None when it names none, or this kubeconfig may not read Kueue's objects."""
        from kubernetes.client import ApiException

        local_queue = queue_name(job)
        if local_queue is None:
            return None
        uid = str((job.get("metadata") or {}).get("uid") or "")
        try:
            listed = self._custom.list_namespaced_custom_object(
                KUEUE_GROUP,
                KUEUE_VERSION,
                self.namespace,
                WORKLOAD_PLURAL,
                label_selector=f"{JOB_UID_LABEL}={uid}",
            )
        except ApiException as error:
            if error.status == 404:  # no such API: the cluster has no Kueue
                return QueueState(local_queue=local_queue, kueue_installed=False)
            if error.status in (401, 403):
                return None
            raise
        workload = newest_workload(listed.get("items") or [])
        try:
            local = self._custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, self.namespace, LOCAL_QUEUE_PLURAL, local_queue
            )
        except ApiException as error:
            if error.status not in (401, 403, 404):
                raise
            exists = False if error.status == 404 else None
            return queue_state(local_queue, workload, local_queue_exists=exists)
        return queue_state(local_queue, workload, local)

    def state(self, job: dict[str, Any] | None = None) -> JobState | None:
        """The job, its pods and where Kueue has it, now; None when there is no such job."""
        job = job if job is not None else self.job()
        return None if job is None else job_state(job, self.pods(), self.queue(job))

    def events(self, state: JobState, limit: int = EVENTS_SHOWN) -> list[dict[str, Any]]:
        """This job's newest events (the operator's: pods created, exited, recreated), not
        those of an earlier job of the same name."""
        response = self._core.list_namespaced_event(
            self.namespace,
            field_selector=f"involvedObject.kind={state.kind},involvedObject.uid={state.uid}",
            _preload_content=False,
        )
        events = json.loads(response.data).get("items") or []
        # Timestamps have whole seconds; the resource version orders events within one.
        events.sort(
            key=lambda e: (
                str(e.get("lastTimestamp") or e.get("eventTime") or ""),
                int(str((e.get("metadata") or {}).get("resourceVersion") or 0)),
            )
        )
        return events[-limit:]

    def log_tail(self, replica: Replica, lines: int | None = LOG_LINES) -> list[str] | str:
        """The last `lines` lines (None: all) the container wrote, or why the API server has
        none (a deleted pod, a node that does not serve logs). Under OnFailure the container may
        have been restarted since: then the previous instance's log holds the failure."""
        from kubernetes.client import ApiException
        from urllib3.exceptions import HTTPError

        try:
            text = self._core.read_namespaced_pod_log(
                replica.pod,
                self.namespace,
                container=self.job_api.container,
                tail_lines=lines,
                previous=not replica.exited_now and replica.restarts > 0,
                _request_timeout=30,
            )
        except ApiException as error:
            return f"the API server could not get it ({error.status} {error.reason})"
        except HTTPError as error:
            return f"the API server could not get it ({error})"
        written = str(text).splitlines()
        return (written[-lines:] if lines else written) or "the log is empty"

    def rank0_progress(self, state: JobState, rank0: str) -> ProgressReport | bool:
        """Rank 0's last report (readers/progress_report.py) from its log as the API server
        serves it now; False when its log has none; True when there is no log to look in yet
        (no rank 0 pod, an empty log, a node that serves none: nothing to say about it)."""
        replica = next((r for r in state.replicas if r.role == rank0), None)
        if replica is None:
            return True
        lines = self.log_tail(replica, SCAN_LINES)
        if isinstance(lines, str):
            return True
        report = last_report(lines)
        return report if report is not None else False

    def follow_log(self, pod: str, *, tail: int | None) -> Iterator[str]:
        """The container's log as it is written, until the container ends; ApiException when
        the API server cannot serve it."""
        response = self._core.read_namespaced_pod_log(
            pod,
            self.namespace,
            container=self.job_api.container,
            follow=True,
            tail_lines=tail,
            _preload_content=False,
        )
        try:
            pending = b""
            for chunk in response.stream(amt=None, decode_content=True):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    yield line.decode(errors="replace").rstrip("\r")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            response.release_conn()

    # -- waiting ----------------------------------------------------------------------------------

    def _next_change(self, resource_version: str, seconds: float) -> dict[str, Any] | None:
        """Block until the job changes after `resource_version` or `seconds` pass; the deleted
        job's last state when it was deleted, else None."""
        from kubernetes import watch

        api = self.job_api
        stream = watch.Watch().stream(
            self._custom.list_namespaced_custom_object,
            api.group,
            api.version,
            self.namespace,
            api.plural,
            field_selector=f"metadata.name={self.name}",
            resource_version=resource_version,
            timeout_seconds=max(1, int(seconds)),
            _request_timeout=seconds + 10,
        )
        for event in stream:
            if event["type"] == "DELETED":
                return {"kind": api.kind, **event["object"]}
            return None
        return None

    def wait(
        self,
        done: Callable[[JobState], bool],
        *,
        timeout: float | None = None,
        on_change: Callable[[JobState], None] = lambda state: None,
        describe: Callable[[JobState], object] = lambda state: "",
        every: tuple[float, Callable[[JobState], None]] | None = None,
    ) -> JobState:
        """Watch the job until `done(state)`; `on_change` sees each state that `describe`
        tells apart from the last; `every` (seconds, call) is called with the state that often
        too, whether the job changed or not (the training's progress is in rank 0's log, not in
        the job). WaitTimeoutError after `timeout` seconds; JobWatchError when the job is
        deleted first, or the API server stays unreachable."""
        from kubernetes.client import ApiException

        deadline = None if timeout is None else time.monotonic() + timeout
        next_call = None if every is None else time.monotonic() + every[0]
        said: object = None
        errors = 0
        job: dict[str, Any] | None = None
        while True:
            try:
                state = self.state(job)
                if state is None:
                    raise JobWatchError(f"{self.title} does not exist (deleted?)")
                if describe(state) != said:
                    said = describe(state)
                    on_change(state)
                if done(state):
                    return state
                if every is not None and next_call is not None and time.monotonic() >= next_call:
                    every[1](state)
                    next_call = time.monotonic() + every[0]
                if job is not None:  # the watch saw it deleted, and it had not finished
                    raise JobWatchError(
                        f"{self.title} was deleted before it finished (it was {state.phase})"
                    )
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WaitTimeoutError(
                        f"{self.title}: gave up after {timeout:.0f}s",
                        state,
                    )
                window = WINDOW_SECONDS if left is None else min(WINDOW_SECONDS, left)
                if state.queued:  # Kueue's reasons change without a change of the job
                    window = min(window, QUEUED_REMINDER_SECONDS / 3)
                if next_call is not None:
                    window = max(1.0, min(window, next_call - time.monotonic()))
                job = self._next_change(state.resource_version, window)
                errors = 0
            except api_errors() as error:
                if isinstance(error, ApiException) and error.status == 410:
                    job = None  # the watch's version expired: read afresh
                    continue
                if isinstance(error, ApiException) and error.status in (401, 403):
                    raise JobWatchError(
                        f"{self.title}: the API server refused to "
                        f"show it ({error.status} {error.reason}); the watch needs get, list "
                        f"and watch on {self.job_api.plural} and get and list on pods"
                    ) from None
                errors += 1
                if errors >= MAX_API_ERRORS:
                    raise JobWatchError(
                        f"{self.title}: the API server failed {errors} times in a row: {error}"
                    ) from None
                job = None
                time.sleep(min(2 * errors, 10))


class TrainingProgress:
    """Says rank 0's progress (its last report, readers/progress_report.py) whenever it is a
    new one: what `pulumi up`'s wait prints every PROGRESS_SECONDS. A log without any report
    is said once, after NO_REPORT_GRACE_SECONDS of reading none (a trainer reports within
    TRAINER_REPORT_EVERY_S of its first step; its start-up, rendezvous and data loading come
    before that)."""

    def __init__(self, watch: JobWatch, rank0: str, say: Callable[[str], None]) -> None:
        self._watch, self._rank0, self._say = watch, rank0, say
        self._last: object = None
        self._none_since: float | None = None
        self._said_none = False

    def __call__(self, state: JobState) -> None:
        found = self._watch.rank0_progress(state, self._rank0)
        if isinstance(found, ProgressReport):
            key = (found.time, found.epoch, found.step, found.done, found.checkpoint)
            if key != self._last:
                self._last = key
                self._say(f"{self._watch.name}: {summary(found)}")
            return
        if found is True or self._said_none:
            return
        now = time.monotonic()
        if self._none_since is None:
            self._none_since = now
        if now - self._none_since >= NO_REPORT_GRACE_SECONDS or state.outcome is not None:
            self._said_none = True
            self._say(f"{self._watch.name}: {no_report()}")
