"""The before-create hook that asks the API server whether the job's namespace admits its pods,
before the job exists.

Why: a job is a custom resource; the API server admits it whatever its pod templates say, and
only refuses the pods when the job's controller creates them (Pod Security's `enforce` level, a
policy webhook). The controller then retries, records its refusal as an event on an object of its
own (the PyTorchJob, a TrainJob's Job) and the job sits there: `pulumi up` reports success, or,
with `job.waitFor: running`, times out half an hour later. A pod created with `dryRun` goes
through the same admission and persists nothing, so the hook creates each distinct pod the job's
API says the controller will make (`JobApi.pods`), in dry-run, and fails the create with the API
server's own reason in one line when a policy refuses it (`POLICY_REFUSALS`): `pulumi up` stops
in seconds, and no job is left behind.

What it cannot see: what the controller adds to the pods (the training operator's init
container, builders/job_apis/pytorchjob.py), and the cluster's own ClusterTrainingRuntime
(`job.clusterRuntime`), of which it knows only the stack's patch. It needs permission to create
pods in the namespace (`make checkpoint` needs it too); without it, or when the API server cannot
answer, the hook says so and lets the create go on: the check can only stop a job that would not
run, never one that would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from builders.job_apis import JobApiError, api_of_kind
from readers.job_watch import JobWatchError, api_client, api_error_reason, api_errors

# How a policy's refusal reads: Pod Security's, an admission webhook's (Kyverno, Gatekeeper), a
# ValidatingAdmissionPolicy's. Such a refusal holds until the pods or the policy change; other
# refusals (RBAC on the caller, a full ResourceQuota, a namespace without its service account
# yet) say nothing of the pods, or pass, and the controller retries them: those the hook only
# reports.
POLICY_REFUSALS = ("violates PodSecurity", "denied the request", "denied request")
# A dry run answers at once; an API server that does not (a dropped connection) is not waited on.
DRY_RUN_TIMEOUT_S = 30


class PodAdmissionError(RuntimeError):
    """The namespace refuses the job's pods; the message is the API server's reason."""


@dataclass(frozen=True)
class PodAdmission:
    """The pods of the job `name` in `namespace` as its controller would create them, tried
    against the namespace."""

    namespace: str
    name: str
    kind: str
    kube_context: str | None
    # The TrainingRuntime the stack declares for a TrainJob (its pods' base), else None.
    runtime: Mapping[str, Any] | None = None

    @property
    def title(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def probe_pods(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One Pod per distinct pod spec among the job's pods (a PyTorchJob's Master and Workers
        share one), named by `generateName` so that no pod of the job's names is in the way."""
        pods: list[dict[str, Any]] = []
        specs: list[Mapping[str, Any]] = []
        for role in api_of_kind(self.kind).pods(job, self.runtime):
            spec = role.template.get("spec") or {}
            if spec in specs:
                continue
            specs.append(spec)
            labels = (role.template.get("metadata") or {}).get("labels") or {}
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "generateName": f"{role.name}-admission-",
                        "namespace": self.namespace,
                        "labels": dict(labels),
                    },
                    "spec": spec,
                }
            )
        return pods

    def check(
        self,
        job: Mapping[str, Any],
        create: Callable[[dict[str, Any]], object],
        log: Callable[[str], None],
    ) -> None:
        """`create` (a dry run) each probe pod; PodAdmissionError on the first one admission
        refuses; `log(message)` says why the check could not be made, when it cannot."""
        try:
            probes = self.probe_pods(job)
        except (JobApiError, KeyError, TypeError) as error:  # a job its API cannot read
            log(f"{self.title}: cannot tell its pods ({error}); creating it unchecked")
            return
        for pod in probes:
            try:
                create(pod)
            except api_errors() as error:
                status = getattr(error, "status", None)
                reason = api_error_reason(error)
                if any(words in reason for words in POLICY_REFUSALS):
                    raise PodAdmissionError(
                        f"{self.title}: the namespace refuses its pods, so the job was not "
                        f"created: {reason} (the pods' user comes from job.securityContext and "
                        "job.runAsRoot)"
                    ) from None
                log(
                    f"{self.title}: could not ask the API server whether the namespace admits "
                    f"the job's pods ({status or type(error).__name__}: {reason}); creating it "
                    "unchecked"
                )
                return

    def dry_run_create(self) -> Callable[[dict[str, Any]], object]:
        """A pod create with `dryRun=All`, through the kubeconfig context the provider uses."""
        from kubernetes import client

        core = client.CoreV1Api(api_client(self.kube_context))
        return lambda pod: core.create_namespaced_pod(
            self.namespace, pod, dry_run="All", _request_timeout=DRY_RUN_TIMEOUT_S
        )


def whole_numbers(value: Any) -> Any:
    """The inputs a hook receives, with their numbers as the manifest had them: the engine
    passes every number as a float (a protobuf Struct), and the Kubernetes client refuses
    `containerPort: 23456.0` or `runAsUser: 10001.0` before any request is made."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


class PodAdmissionHook:
    """The job's before-create hook: `hook` goes into its ResourceHookBinding."""

    def __init__(self, name: str, admission: PodAdmission) -> None:
        self.admission = admission
        self.hook = pulumi.ResourceHook(f"{name}-pod-admission", self._before)

    async def _before(self, args: pulumi.ResourceHookArgs) -> None:
        loop = asyncio.get_running_loop()

        def log(message: str) -> None:
            loop.call_soon_threadsafe(pulumi.log.warn, message)

        # The job as the engine resolved it (the image's digest included); the Kubernetes client
        # blocks, so the check runs in a thread. An error from a before-create hook fails the
        # create with its message, and the job is not made.
        job = whole_numbers(dict(args.new_inputs or {}))
        admission = self.admission

        def check() -> None:
            try:
                create = admission.dry_run_create()
            except JobWatchError as error:
                log(f"{admission.title}: cannot check its pods' admission: {error}")
                return
            admission.check(job, create, log)

        await asyncio.to_thread(check)
