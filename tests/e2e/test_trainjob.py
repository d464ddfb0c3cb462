"""A TrainJob stack's whole life through the real engine, against Kubeflow Trainer v2.3.0 and
JobSet v0.12.0 running on the control plane with their webhooks (tools/cluster/trainer_plane.py):
preview with the policy pack, a bad value, up (the TrainJob and its TrainingRuntime as the
builders describe them, the JobSet's pods with the environment the local runner emulates,
`job.waitFor: running` and `make status`), no drift, no plaintext secret, replacement on a change
of the immutable spec or of the runtime, and destroy keeping the claim. Kueue runs beside them
where the suite's plane can run it: its webhook adds a runtime patch of its own to every TrainJob,
which the stack leaves alone and does not see as a change. The tests run in file order on one
stack."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import pytest

from components.job_apis import job_api
from components.job_apis.trainjob import trainingruntime_manifest, trainjob_manifest
from components.manifests import resource_names
from components.settings import PROJECT, StackSettings
from tests.e2e.conftest import REGISTRY_PASSWORD, Cluster, Project, Stack, command_status
from tests.e2e.kube import NamespaceObjects
from tests.e2e.test_stack_lifecycle import contains
from tools.local_backends.pods import container_env

T = TypeVar("T")
NAMESPACE = "default"
API = job_api("trainjob")
assert API.run_object is not None
JOBSET = API.run_object
TRAINJOB_TYPE = API.resource_type
RUNTIME_TYPE = f"kubernetes:{API.api_version}:TrainingRuntime"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MARKER = "snapshot-from-an-earlier-run.txt"


# The runtime patch Kueue's webhook adds to every TrainJob created where it runs.
KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"


@pytest.fixture(scope="module", autouse=True)
def kueue_beside(cluster: Cluster) -> bool:
    """Whether Kueue runs on the plane (started here if the suite's plane can run it)."""
    plane = cluster.plane
    if plane is not None and plane.private_mounts:
        plane.add_kueue()
        return True
    return False


@pytest.fixture(scope="module")
def stack(project: Project) -> Stack:
    return project.stack("e2e-trainjob")


@pytest.fixture(scope="module")
def settings(stack: Stack) -> StackSettings:
    return stack.settings()


class Kube(NamespaceObjects):
    def trainer(self, plural: str, name: str) -> Any | None:
        return self.custom_object(API.group, API.version, plural, name)

    def jobset(self, name: str) -> Any | None:
        return self.custom_object(*JOBSET, name)

    def runtimes(self) -> list[str]:
        listed = self.custom_objects(API.group, API.version, "trainingruntimes")
        return sorted(item["metadata"]["name"] for item in listed)

    def pods(self, job: str) -> list[Any]:
        return self.pods_matching(API.pod_selector(job))

    def claim(self, name: str) -> Any | None:
        return self.get("persistent_volume_claim", name)


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster, NAMESPACE)


def resolved_env(pod: dict[str, Any]) -> dict[str, str]:
    """The `node` container's environment as the kubelet resolves it (the downward API's fields
    from the pod's own metadata)."""
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "node"]
    env: dict[str, str] = {}
    annotations = pod["metadata"].get("annotations") or {}
    labels = pod["metadata"].get("labels") or {}
    for entry in container.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        path = entry["valueFrom"]["fieldRef"]["fieldPath"]
        # PET_NODE_RANK from the annotation (Trainer), JOB_COMPLETION_INDEX from the label (Job).
        assert path in (
            f"metadata.annotations['{COMPLETION_INDEX}']",
            f"metadata.labels['{COMPLETION_INDEX}']",
        ), path
        source = annotations if path.startswith("metadata.annotations") else labels
        env[entry["name"]] = source[COMPLETION_INDEX]
    return env


# -- preview with the policy pack, and what it refuses ------------------------------------------


def test_preview_with_policy_pack_passes(stack: Stack) -> None:
    result = stack.preview()
    # Provider, claim, secret, runtime, job, five components and the stack itself.
    assert result.summary() == {"create": 11}, result.output
    assert "pytorch-distributed-guardrails" in result.output, result.output
    assert "Traceback" not in result.output


def test_policy_pack_blocks_a_violating_change(stack: Stack) -> None:
    stack.config_set("checkpoints.accessMode", "ReadWriteOnce")
    try:
        result = stack.preview(check=False)
        assert result.returncode != 0
        assert "checkpoint-claim-protection" in result.output
        assert "pods of TrainJob 'ddp-e2e-tj'" in result.output
    finally:
        stack.config_set("checkpoints.accessMode", "ReadWriteMany")


def test_elastic_with_trainjob_fails_preview_with_one_line_naming_the_key(stack: Stack) -> None:
    stack.config_set("job.elastic.minNodes", "1")
    try:
        result = stack.preview(check=False)
        assert result.returncode != 0
        error_lines = [line for line in result.output.splitlines() if "invalid config" in line]
        assert error_lines, result.output
        assert (
            f"invalid config {PROJECT}:job.elastic = 'set': job.api: trainjob" in (error_lines[0])
        )
        registered = [urn for urn in result.registered() if "pulumi:pulumi:Stack" not in urn]
        assert registered == [], "a resource was registered despite the bad value"
    finally:
        stack.cli("config", "rm", "--path", f"{PROJECT}:job.elastic")


# -- up: the objects, the JobSet's pods and their environment -----------------------------------


def test_up_creates_the_runtime_and_the_trainjob_as_the_builders_describe(
    stack: Stack, settings: StackSettings, kube: Kube, kueue_beside: bool
) -> None:
    result = stack.up()
    assert result.summary() == {"create": 11}, result.output
    runtime = trainingruntime_manifest(settings)
    assert runtime is not None
    live_runtime = kube.trainer("trainingruntimes", runtime["metadata"]["name"])
    assert live_runtime is not None
    assert contains(live_runtime, runtime) == []
    job = kube.trainer("trainjobs", settings.job.name)
    assert job is not None
    assert contains(job, trainjob_manifest(settings, image=settings.image.ref)) == []
    managers = [patch["manager"] for patch in job["spec"].get("runtimePatches") or []]
    assert (KUEUE_PATCH_MANAGER in managers) == kueue_beside, managers
    assert kube.jobset(settings.job.name) is not None, "Trainer built no JobSet"


def test_the_jobsets_pods_get_the_environment_the_local_runner_emulates(
    settings: StackSettings, kube: Kube
) -> None:
    job = trainjob_manifest(settings, image=settings.image.ref)
    roles = {role.name: role for role in API.pods(job, trainingruntime_manifest(settings))}
    pods = kube.pods(settings.job.name)
    assert sorted(pod["spec"]["hostname"] for pod in pods) == sorted(roles)
    for pod in pods:
        role = roles[pod["spec"]["hostname"]]
        assert pod["spec"]["subdomain"] == settings.job.name
        emulated, _ = container_env(role.container, pod=role.name, namespace=NAMESPACE)
        assert resolved_env(pod) == {**emulated, **role.env}, role.name
        # The claim and the pull secret reach the pods through the runtime patch.
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"]["volumes"]
            if v.get("persistentVolumeClaim")
        ]
        assert claims == [resource_names(settings).claim]
        assert pod["spec"]["imagePullSecrets"] == [{"name": resource_names(settings).pull_secret}]
        assert pod["spec"]["containers"][0]["image"] == settings.image.ref


def test_up_waited_until_every_trainer_pod_runs_and_make_status_says_so(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    assert {pod["status"]["phase"] for pod in kube.pods(settings.job.name)} == {"Running"}
    done = stack.status("--no-follow")
    assert command_status(done) == 3, done.stdout + done.stderr  # still running
    assert f"TrainJob {NAMESPACE}/{settings.job.name}: Running" in done.stdout, done.stdout
    assert f"{settings.job.name}-node-0-0-" in done.stdout  # the pods, with their suffixes


# -- no drift, no plaintext secret --------------------------------------------------------------


def test_preview_right_after_up_expects_no_changes(stack: Stack) -> None:
    stack.preview("--expect-no-changes")


def test_outputs_and_state_hold_no_plaintext_password(stack: Stack) -> None:
    encoded = base64.b64encode(REGISTRY_PASSWORD.encode()).decode()
    for args in (("stack", "output", "--json"), ("stack", "export")):
        text = stack.cli(*args).stdout
        assert REGISTRY_PASSWORD not in text, args
        assert encoded not in text, args


# -- replacement: the immutable spec, and the runtime ------------------------------------------


def test_changing_total_epochs_replaces_the_trainjob_deleting_the_old_one_first(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    old_uid = kube.trainer("trainjobs", settings.job.name)["metadata"]["uid"]
    stack.config_set("job.totalEpochs", str(settings.job.total_epochs + 2))
    result = stack.up()
    steps = result.steps(TRAINJOB_TYPE)
    assert steps.index("delete-replaced") < steps.index("create-replacement"), steps
    assert result.steps(RUNTIME_TYPE) == ["same"]  # the runtime did not change
    job = kube.trainer("trainjobs", settings.job.name)
    assert job["metadata"]["uid"] != old_uid
    longer = replace(
        settings, job=replace(settings.job, total_epochs=settings.job.total_epochs + 2)
    )
    assert contains(job, trainjob_manifest(longer, image=settings.image.ref)) == []
    assert_the_jobset_is_its_own(kube, job, settings.job.nodes)


def assert_the_jobset_is_its_own(kube: Kube, job: dict[str, Any], nodes: int) -> None:
    """The JobSet of this name belongs to this TrainJob and runs its pods: the old TrainJob was
    deleted in the background, and the new one was made only once the old run was gone (else
    Trainer would have applied the new JobSet onto the old one, its pods still running)."""
    jobset = wait_for(lambda: kube.jobset(job["metadata"]["name"]), "the new JobSet")
    owners = [owner["uid"] for owner in jobset["metadata"].get("ownerReferences", [])]
    assert owners == [job["metadata"]["uid"]], jobset["metadata"]
    assert jobset["metadata"].get("deletionTimestamp") is None
    pods = wait_for(
        lambda: (found := kube.pods(job["metadata"]["name"])) and len(found) == nodes and found,
        "the new JobSet's pods",
    )
    created = moment(jobset["metadata"]["creationTimestamp"])
    assert all(moment(pod["metadata"]["creationTimestamp"]) >= created for pod in pods), pods


def moment(timestamp: str) -> datetime:
    """A timestamp as the API server writes it (`...Z`) or the client serializes it."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def wait_for(read: Callable[[], T | None | bool], what: str, seconds: float = 120) -> T:
    deadline = time.monotonic() + seconds
    while not (found := read()):
        assert time.monotonic() < deadline, f"{what}: not there after {seconds:.0f}s"
        time.sleep(0.5)
    return found  # type: ignore[return-value]


def test_changing_the_restart_policy_is_a_new_runtime_and_a_new_trainjob(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    old_runtime = trainingruntime_manifest(settings)["metadata"]["name"]  # type: ignore[index]
    stack.config_set("job.restartPolicy", "OnFailure")  # from the default ExitCode
    result = stack.up()
    assert "create-replacement" in result.steps(TRAINJOB_TYPE)
    new_settings = stack.settings()
    new_runtime = trainingruntime_manifest(new_settings)["metadata"]["name"]  # type: ignore[index]
    assert new_runtime != old_runtime
    # The old runtime went once no TrainJob used it (Trainer's resource-in-use finalizer).
    assert kube.runtimes() == [new_runtime]
    job = kube.trainer("trainjobs", settings.job.name)
    assert job["spec"]["runtimeRef"]["name"] == new_runtime


# -- destroy keeps the retained claim -----------------------------------------------------------


def test_up_right_after_destroy_waits_for_the_old_run_and_makes_its_own(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    stack.destroy()
    assert kube.trainer("trainjobs", settings.job.name) is None
    # At once: the garbage collector has the old JobSet and pods yet to remove.
    result = stack.up()
    assert "create" in result.steps(TRAINJOB_TYPE), result.output
    job = kube.trainer("trainjobs", settings.job.name)
    assert_the_jobset_is_its_own(kube, job, settings.job.nodes)


def test_destroy_keeps_the_retained_claim_and_removes_the_rest(
    stack: Stack, cluster: Cluster, settings: StackSettings, kube: Kube
) -> None:
    names = resource_names(settings)
    claim = kube.claim(names.claim)
    if cluster.plane is not None:
        (cluster.plane.volume_path(claim["spec"]["volumeName"]) / MARKER).write_text("epoch 6\n")
    stack.destroy()
    assert kube.trainer("trainjobs", names.job) is None
    assert kube.runtimes() == []
    # Deleted in the background: the JobSet and its pods go right after.
    wait_for(lambda: kube.jobset(names.job) is None and kube.pods(names.job) == [], "cleanup")
    kept = kube.claim(names.claim)
    assert kept is not None and kept["metadata"]["uid"] == claim["metadata"]["uid"]
    if cluster.plane is not None:
        path = cluster.plane.volume_path(claim["spec"]["volumeName"]) / MARKER
        assert path.read_text() == "epoch 6\n"
