"""One home per job API: everything the project knows about a training job's API lives in its
module here, and every layer asks it instead of knowing it.

A job API is what the stack declares to run the training pods: the training operator's
PyTorchJob (kubeflow.org/v1, `pytorchjob.py`) or Kubeflow Trainer v2's TrainJob
(trainer.kubeflow.org/v1alpha1, `trainjob.py`), chosen by the stack key `job.api`. Each module
holds one `JobApi`:

* the builder: the manifests the stack applies for the job (`manifests`);
* the pods its controller creates: their stable names, templates, training container and the
  environment the controller injects into them (`pods`), rank 0's address and port;
* how a person and a watch find it on the cluster: CRD group, version, plural and kind, the
  label selector of its pods, which pod a label set names, its conditions in the words of
  `readers.job_state`, and the kubectl commands for logs, status and exec.

The Pulumi components (components/pytorch_job.py, components/train_job.py, each named by its
API's `component` and composed by components/training_environment.py, which takes its kubectl
commands from here too), the offline
render, the local runner and its container backend, the supervisor's policy, the watch behind
`job.waitFor` and `make status` ask it; the policy pack runs in its own interpreter and has the
same split per API in policy/rules/jobs/. Adding a third API is one module here, one there, a
line in each registry, and its component (tests/builders/job_apis/test_registry.py registers a
made-up one and runs it through the watch and the local runner unchanged).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from settings.stack import StackSettings


class JobApiError(ValueError):
    """A job dict its API's controller would reject, or that we cannot interpret."""


@dataclass(frozen=True)
class PodRole:
    """One pod the job's controller creates, as the local runner stands it in.

    ``name``: its stable name (the operator's pod name; a JobSet pod's hostname, since the pod's
    own name ends in a random suffix); ``env``: what the controller injects into the training
    container, layered after the container's own env (the last entry of a name wins)."""

    name: str
    replica_type: str
    index: int
    template: Mapping[str, Any] = field(repr=False)
    container: Mapping[str, Any] = field(repr=False)
    restart_policy: str
    env: dict[str, str]


@dataclass(frozen=True)
class PodIdentity:
    """Which pod of the job a pod on the cluster is: its replica type, index and stable name."""

    replica_type: str
    index: int
    role: str


class JobApi(ABC):
    """The facts of one job API; subclasses fill in every attribute and method."""

    name: str  # the value of `job.api`
    group: str
    version: str
    plural: str
    kind: str
    container: str  # the training container's name in every pod
    replica_order: tuple[str, ...]  # how `make status` orders the pods
    # Keys of the injected env that carry rank 0's address and its rendezvous port.
    master_addr_keys: tuple[str, ...]
    master_port_keys: tuple[str, ...]
    # The object (group, version, plural) the operator makes for a job under the job's own name,
    # where the operator makes it again for as long as the job exists, even while the job is being
    # deleted: such a job is deleted in the background and its next incarnation waits for the
    # previous one's run to be gone (components/previous_run.py). None: the operator stops.
    run_object: tuple[str, str, str] | None = None
    # Its Pulumi component, as "module:Class": named, not imported, since the components sit a
    # layer above this one. TrainingEnvironment constructs it (components/training_environment.py
    # `job_component`, which says with what).
    component: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def resource_type(self) -> str:
        """The Pulumi type of the job (pulumi_kubernetes' CustomResource)."""
        return f"kubernetes:{self.api_version}:{self.kind}"

    # -- builder --------------------------------------------------------------------------------

    @abstractmethod
    def job_manifest(self, settings: StackSettings, *, image: Any) -> dict[str, Any]:
        """The job object itself."""

    def runtime_manifest(self, settings: StackSettings) -> dict[str, Any] | None:
        """An object the job runs on that the stack declares too (a TrainingRuntime); None."""
        return None

    @abstractmethod
    def rank0_pod(self, settings: StackSettings) -> str:
        """The stable name of the pod rank 0 runs in."""

    @abstractmethod
    def logs_args(self, settings: StackSettings) -> list[str]:
        """kubectl arguments that follow rank 0's log."""

    @abstractmethod
    def job_image(self, job: Mapping[str, Any]) -> str | None:
        """The training image of `job` as the API server returns it (`make checkpoint` reads
        the claim with it while the job exists); None when it names none."""

    def status_resource(self, job_name: str) -> str:
        return f"{self.plural}.{self.group}/{job_name}"

    # -- on the cluster -------------------------------------------------------------------------

    @abstractmethod
    def pod_selector(self, job_name: str) -> str:
        """The label selector of the job's pods."""

    @abstractmethod
    def identify(self, pod: Mapping[str, Any]) -> PodIdentity:
        """Which pod of the job `pod` (API server JSON) is."""

    @abstractmethod
    def conditions(
        self, job: Mapping[str, Any], pods: list[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """The job's conditions as readers.job_state reads them (Created, Running,
        Succeeded, Failed, ...), each a dict with type, status, reason, message and
        lastTransitionTime."""

    # -- the pods' environment ------------------------------------------------------------------

    @abstractmethod
    def pods(
        self, job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None
    ) -> list[PodRole]:
        """Every pod the controller creates for `job`, rank 0's first, with its environment;
        `runtime` is the runtime the job runs on where the stack declares one."""

    @abstractmethod
    def master_address(self, job: Mapping[str, Any]) -> str:
        """The DNS name the pods reach rank 0 at."""

    @abstractmethod
    def master_port(self, job: Mapping[str, Any]) -> int:
        """The port of rank 0's rendezvous (an elastic job's c10d store)."""

    def is_elastic(self, job: Mapping[str, Any]) -> bool:
        return False

    @abstractmethod
    def backoff_limit(
        self, job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None
    ) -> int | None:
        """Restarts in place before the job fails (OnFailure); None: the controller's default."""

    @abstractmethod
    def active_deadline_seconds(self, job: Mapping[str, Any]) -> float | None:
        """The job's run-time bound, if it has one."""


def _registry() -> dict[str, JobApi]:
    from builders.job_apis import pytorchjob, trainjob

    return {api.name: api for api in (pytorchjob.API, trainjob.API)}


def job_api(name: str) -> JobApi:
    """The API of `job.api` = `name`."""
    apis = _registry()
    if name not in apis:
        raise JobApiError(f"unknown job API {name!r}: allowed: {', '.join(apis)}")
    return apis[name]


def api_of_settings(settings: StackSettings) -> JobApi:
    return job_api(settings.job.api)


def api_of_job(job: Mapping[str, Any]) -> JobApi:
    """The API of a job dict: by its kind, or (a hand-written dict without one) by its spec."""
    apis = list(_registry().values())
    kind = job.get("kind")
    for api in apis:
        if kind == api.kind:
            return api
    if kind is None:
        spec = job.get("spec") or {}
        if "pytorchReplicaSpecs" in spec:
            return job_api("pytorchjob")
        if "trainer" in spec or "runtimeRef" in spec:
            return job_api("trainjob")
    raise JobApiError(
        f"a job of kind {kind!r}: the job APIs are {', '.join(api.kind for api in apis)}"
    )


def api_of_kind(kind: str) -> JobApi:
    for api in _registry().values():
        if api.kind == kind:
            return api
    raise JobApiError(f"no job API has kind {kind!r}")
