"""A stack's whole life through the real engine, once per job API: the training operator's
PyTorchJob (tests/e2e/Pulumi.e2e.yaml) and Kubeflow Trainer v2's TrainJob on a TrainingRuntime of
its own (tests/e2e/Pulumi.e2e-trainjob.yaml; Trainer v2.3.0 and JobSet v0.12.0 run on the control
plane with their webhooks, cluster/trainer_plane.py). Preview with the policy pack, bad
values, up (the objects as the builders describe them, the controller's pods with the environment
the local runner emulates, `job.waitFor: running`), no drift, no plaintext secret, replacement on a
spec change, destroy keeping the claim and up again on it. Kueue runs beside the TrainJob half
where the suite's plane can run it: its webhook adds a runtime patch of its own to every TrainJob,
which the stack leaves alone and does not see as a change.

Each job API's tests run in file order on its own stack (the module-scoped `job_api_name`; under
xdist each half is a group of its own, tests/e2e/conftest.py `module_group`). A test only one API
has carries `@pytest.mark.job_api(name)`, and the other half leaves it out.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from builders.job_apis import JobApi, job_api
from builders.job_apis.pytorchjob import injected_env, replica_pods, training_container
from builders.manifests import (
    READER_MANAGER,
    checkpoint_claim_manifest,
    registry_secret_manifest,
    resource_names,
)
from builders.network_policy import network_policy_manifest
from settings.stack import PROJECT, StackSettings
from tests.e2e.conftest import (
    REGISTRY_PASSWORD,
    Cluster,
    Project,
    Result,
    Stack,
    command_status,
    own_lines,
)
from tests.e2e.kube import NamespaceObjects
from tests.support.waiting import wait_until
from tools.local_backends.pods import container_env

NAMESPACE = "default"
# Each job API's stack file in tests/e2e/.
STACKS = {"pytorchjob": "e2e", "trainjob": "e2e-trainjob"}
# A file a previous run left on the claim: it must survive destroy and be there for the next up.
MARKER = "snapshot-from-an-earlier-run.txt"
# The runtime patch Kueue's webhook adds to every TrainJob created where it runs.
KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"
RUNTIME_PLURAL = "trainingruntimes"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture(scope="module", params=sorted(STACKS))
def job_api_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def api(job_api_name: str) -> JobApi:
    return job_api(job_api_name)


@pytest.fixture(scope="module", autouse=True)
def kueue_beside(cluster: Cluster, api: JobApi) -> bool:
    """Whether Kueue runs on the plane: started here for the TrainJob half, where the suite's
    plane can run it."""
    plane = cluster.plane
    if api.run_object is not None and plane is not None and plane.private_mounts:
        plane.add_kueue()
        return True
    return False


@pytest.fixture(scope="module")
def stack(project: Project, job_api_name: str) -> Stack:
    return project.stack(STACKS[job_api_name])


@pytest.fixture(scope="module")
def settings(stack: Stack) -> StackSettings:
    return stack.settings()


class Kube(NamespaceObjects):
    def __init__(self, cluster: Cluster, api: JobApi) -> None:
        super().__init__(cluster, NAMESPACE)
        self.job_api = api

    def job(self, name: str) -> Any | None:
        return self.custom_object(
            self.job_api.group, self.job_api.version, self.job_api.plural, name
        )

    def run_object(self, name: str) -> Any | None:
        """What the controller makes for the job under its name (a TrainJob's JobSet)."""
        assert self.job_api.run_object is not None
        return self.custom_object(*self.job_api.run_object, name)

    def runtime(self, name: str) -> Any | None:
        return self.custom_object(self.job_api.group, self.job_api.version, RUNTIME_PLURAL, name)

    def runtimes(self) -> list[str]:
        listed = self.custom_objects(self.job_api.group, self.job_api.version, RUNTIME_PLURAL)
        return sorted(item["metadata"]["name"] for item in listed)

    def pods(self, job: str) -> list[Any]:
        return self.pods_matching(self.job_api.pod_selector(job))

    def claim(self, name: str) -> Any | None:
        return self.get("persistent_volume_claim", name)

    def network_policy(self, name: str) -> Any | None:
        from kubernetes import client
        from kubernetes.client import ApiException

        try:
            found = client.NetworkingV1Api(self.api).read_namespaced_network_policy(
                name, self.namespace
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return self.api.sanitize_for_serialization(found)


@pytest.fixture(scope="module")
def kube(cluster: Cluster, api: JobApi) -> Kube:
    return Kube(cluster, api)


def contains(actual: Any, expected: Any, path: str = "") -> list[str]:
    """Where `actual` differs from `expected`, ignoring what the API server or the operator added
    (defaults, status) but nothing the builders set. In a list keyed by `manager` (a TrainJob's
    runtimePatches: each controller owns its entry, and Kueue's webhook adds one to every
    TrainJob created where it runs), only the builders' managers' entries are compared."""
    if isinstance(expected, list) and isinstance(actual, list) and _keyed_by_manager(expected):
        ours = {item["manager"] for item in expected}
        actual = [item for item in actual if item.get("manager") in ours]
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return [f"{path}: expected an object, got {actual!r}"]
        problems: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                problems.append(f"{path}.{key}: missing")
            else:
                problems += contains(actual[key], value, f"{path}.{key}")
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {expected!r}, got {actual!r}"]
        return [
            p
            for i, (a, e) in enumerate(zip(actual, expected, strict=True))
            for p in contains(a, e, f"{path}[{i}]")
        ]
    if actual != expected:
        return [f"{path}: expected {expected!r}, got {actual!r}"]
    return []


def _keyed_by_manager(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(item, Mapping) and "manager" in item for item in items)


def created_by_up(api: JobApi, settings: StackSettings) -> int:
    """What a first `up` creates: the provider, claim, secret, NetworkPolicy and job, a runtime
    where the API has one, six components and the stack itself."""
    return 12 + (api.runtime_manifest(settings) is not None)


def runtime_type(api: JobApi) -> str:
    return f"kubernetes:{api.api_version}:TrainingRuntime"


# -- preview with the policy pack, and what it refuses ------------------------------------------


def test_preview_with_policy_pack_passes(
    stack: Stack, api: JobApi, settings: StackSettings
) -> None:
    result = stack.preview()
    assert result.summary() == {"create": created_by_up(api, settings)}, result.output
    assert "pytorch-distributed-guardrails" in result.output, result.output
    assert "Traceback" not in result.output
    # The language host sits next to the CLI and the providers are installed plugins, as in a
    # user's installation: the CLI finds no plugin on PATH to warn about.
    assert "from $PATH" not in result.output, result.output


def test_policy_pack_blocks_a_violating_change(
    stack: Stack, api: JobApi, settings: StackSettings
) -> None:
    stack.config_set("checkpoints.accessMode", "ReadWriteOnce")
    try:
        result = stack.preview(check=False)
        assert result.returncode != 0
        assert "checkpoint-claim-protection" in result.output
        assert "mandatory" in result.output
        assert f"pods of {api.kind} '{settings.job.name}'" in result.output, result.output
    finally:
        stack.config_set("checkpoints.accessMode", "ReadWriteMany")


def assert_refused_before_registering(result: Result, error: str) -> None:
    """A preview that failed with the one-line error `error` (naming the key), no traceback, and
    registered nothing: the engine registers the stack itself before the program runs."""
    assert result.returncode != 0
    error_lines = [line for line in result.output.splitlines() if "invalid config" in line]
    assert error_lines, result.output
    assert error in error_lines[0]
    assert "Traceback" not in result.output
    registered = [urn for urn in result.registered() if "pulumi:pulumi:Stack" not in urn]
    assert registered == [], "a resource was registered despite the bad value"


def test_bad_config_value_fails_preview_with_one_line_naming_the_key(stack: Stack) -> None:
    stack.config_set("job.batchSize", "0")
    try:
        result = stack.preview(check=False)
        assert_refused_before_registering(result, f"invalid config {PROJECT}:job.batchSize = 0")
    finally:
        stack.config_set("job.batchSize", "32")


@pytest.mark.job_api("trainjob")
def test_elastic_with_trainjob_fails_preview_with_one_line_naming_the_key(stack: Stack) -> None:
    stack.config_set("job.elastic.minNodes", "1")
    try:
        result = stack.preview(check=False)
        assert_refused_before_registering(
            result, f"invalid config {PROJECT}:job.elastic = 'set': job.api: trainjob"
        )
    finally:
        stack.cli("config", "rm", "--path", f"{PROJECT}:job.elastic")


# -- up creates what the builders describe ------------------------------------------------------


def test_up_creates_secret_claim_and_job_as_the_builders_describe(
    stack: Stack, api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    result = stack.up()
    assert result.summary() == {"create": created_by_up(api, settings)}, result.output
    names = resource_names(settings)

    secret = kube.get("secret", names.pull_secret)
    expected_secret = registry_secret_manifest(settings, password=REGISTRY_PASSWORD)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert contains(secret["metadata"], expected_secret["metadata"]) == []
    stored = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    built = json.loads(base64.b64decode(expected_secret["data"][".dockerconfigjson"]))
    assert stored == built

    claim = kube.claim(names.claim)
    assert contains(claim, checkpoint_claim_manifest(settings)) == []
    assert claim["status"]["phase"] == "Bound"

    expected_policy = network_policy_manifest(settings)
    assert expected_policy is not None
    policy = kube.network_policy(expected_policy["metadata"]["name"])
    assert contains(policy, expected_policy) == []

    runtime = api.runtime_manifest(settings)
    if runtime is not None:
        live_runtime = kube.runtime(runtime["metadata"]["name"])
        assert live_runtime is not None
        assert contains(live_runtime, runtime) == []
    job = kube.job(names.job)
    assert job is not None
    assert contains(job, api.job_manifest(settings, image=settings.image.ref)) == []
    if api.run_object is not None:
        assert kube.run_object(names.job) is not None, f"{api.kind}'s controller made nothing"


@pytest.mark.job_api("trainjob")
def test_kueues_webhook_patches_the_trainjob_where_kueue_runs(
    settings: StackSettings, kube: Kube, kueue_beside: bool
) -> None:
    job = kube.job(settings.job.name)
    managers = [patch["manager"] for patch in job["spec"].get("runtimePatches") or []]
    assert (KUEUE_PATCH_MANAGER in managers) == kueue_beside, managers


@pytest.mark.job_api("pytorchjob")
def test_operator_creates_pods_and_services_with_the_emulated_environment(
    api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    manifest = api.job_manifest(settings, image=settings.image.ref)
    for replica_type, index in replica_pods(manifest):
        pod_name = f"{settings.job.name}-{replica_type.lower()}-{index}"
        pod = kube.get("pod", pod_name)
        assert pod is not None, f"the operator created no pod {pod_name}"
        assert kube.get("service", pod_name) is not None, f"no service {pod_name}"
        template = manifest["spec"]["pytorchReplicaSpecs"][replica_type]["template"]
        template_env = training_container(template, replica_type).get("env", [])
        # The operator appends its variables after the template's own (a later duplicate wins).
        pod_env = training_container(pod, replica_type).get("env", [])
        assert contains(pod_env[: len(template_env)], template_env) == [], pod_name
        operator_env = {item["name"]: item.get("value") for item in pod_env[len(template_env) :]}
        assert operator_env == injected_env(manifest, replica_type, index), pod_name


def resolved_env(pod: dict[str, Any], container_name: str) -> dict[str, str]:
    """A container's environment as the kubelet resolves it (the downward API's fields from the
    pod's own metadata)."""
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == container_name]
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


@pytest.mark.job_api("trainjob")
def test_the_jobsets_pods_get_the_environment_the_local_runner_emulates(
    api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    job = api.job_manifest(settings, image=settings.image.ref)
    roles = {role.name: role for role in api.pods(job, api.runtime_manifest(settings))}
    pods = kube.pods(settings.job.name)
    assert sorted(pod["spec"]["hostname"] for pod in pods) == sorted(roles)
    names = resource_names(settings)
    for pod in pods:
        role = roles[pod["spec"]["hostname"]]
        assert pod["spec"]["subdomain"] == settings.job.name
        emulated, _ = container_env(role.container, pod=role.name, namespace=NAMESPACE)
        assert resolved_env(pod, api.container) == {**emulated, **role.env}, role.name
        # The claim and the pull secret reach the pods through the runtime patch.
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"]["volumes"]
            if v.get("persistentVolumeClaim")
        ]
        assert claims == [names.claim]
        assert pod["spec"]["imagePullSecrets"] == [{"name": names.pull_secret}]
        assert pod["spec"]["containers"][0]["image"] == settings.image.ref


def test_up_waited_until_the_pods_run_and_make_status_says_so(
    cluster: Cluster, stack: Stack, api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    manifest = api.job_manifest(settings, image=settings.image.ref)
    pods = kube.pods(settings.job.name)
    assert len(pods) == len(api.pods(manifest, api.runtime_manifest(settings))), pods
    # On kwok the pods run until told otherwise; on a real cluster the small job may be done.
    reached = {"Running"} if cluster.fake_nodes else {"Running", "Succeeded"}
    conditions = api.conditions(kube.job(settings.job.name), pods)
    assert {c["type"] for c in conditions if c["status"] == "True"} & reached, conditions
    assert {pod["status"]["phase"] for pod in pods} <= reached, pods
    if not cluster.fake_nodes:
        return
    done = stack.status("--no-follow")
    assert command_status(done) == 3, done.stdout + done.stderr  # still running
    assert f"{api.kind} {NAMESPACE}/{settings.job.name}: Running" in done.stdout, done.stdout
    for pod in pods:
        assert pod["metadata"]["name"] in done.stdout, done.stdout


def test_make_checkpoint_where_the_node_serves_no_exec_is_one_line_and_leaves_no_pod(
    cluster: Cluster, stack: Stack, kube: Kube, tmp_path: Path
) -> None:
    """kwok's nodes run no container: the reader pod reports Running, but no exec reaches it."""
    if not cluster.fake_nodes:
        pytest.skip("a real cluster's nodes serve exec: tests/e2e/test_real_node.py copies")
    done = stack.checkpoint(tmp_path / "out")
    assert command_status(done) == 2, done.stdout + done.stderr
    [line] = own_lines(done.stderr)
    # Its first command lists the run's directory (a job.command's has no manifest to read).
    assert line.startswith("error: cannot run ls in reader pod "), line
    assert "the node does not serve exec to the API server" in line, line
    assert kube.pods_matching(f"app.kubernetes.io/managed-by={READER_MANAGER}") == []
    assert not (tmp_path / "out").exists()


# -- no changes right after up; no plaintext secret ---------------------------------------------


def test_preview_right_after_up_expects_no_changes(stack: Stack) -> None:
    stack.preview("--expect-no-changes")


def test_refresh_finds_no_drift(stack: Stack) -> None:
    stack.cli("refresh", "--yes", "--expect-no-changes")


def test_outputs_and_state_hold_no_plaintext_password(stack: Stack) -> None:
    encoded = base64.b64encode(REGISTRY_PASSWORD.encode()).decode()
    for args in (("stack", "output", "--json"), ("stack", "export")):
        text = stack.cli(*args).stdout
        assert REGISTRY_PASSWORD not in text, args
        assert encoded not in text, args
    # Pulumi marks each secret value in the state with this signature key, beside its ciphertext.
    state = stack.cli("stack", "export").stdout
    assert "4dabf18193072939515e22adb298388d" in state, "no value is marked secret in the state"
    assert "ciphertext" in state


# -- a spec change replaces the job; a metadata change updates it promptly ----------------------


def test_changing_total_epochs_replaces_the_job_deleting_the_old_one_first(
    stack: Stack, api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    old_uid = kube.job(settings.job.name)["metadata"]["uid"]
    stack.config_set("job.totalEpochs", str(settings.job.total_epochs + 2))
    result = stack.up()
    steps = result.steps(api.resource_type)
    assert steps.index("delete-replaced") < steps.index("create-replacement"), steps
    if api.runtime_manifest(settings) is not None:
        assert result.steps(runtime_type(api)) == ["same"]  # the runtime did not change
    job = kube.job(settings.job.name)
    assert job["metadata"]["uid"] != old_uid
    longer = replace(
        settings, job=replace(settings.job, total_epochs=settings.job.total_epochs + 2)
    )
    assert contains(job, api.job_manifest(longer, image=settings.image.ref)) == []
    if api.run_object is not None:
        assert_the_run_object_is_its_own(kube, job, settings.job.nodes)


def assert_the_run_object_is_its_own(kube: Kube, job: dict[str, Any], nodes: int) -> None:
    """The run object of this name (a JobSet) belongs to this job and runs its pods: the old job
    was deleted in the background, and the new one was made only once the old run was gone (else
    Trainer would have applied the new JobSet onto the old one, its pods still running)."""
    name = job["metadata"]["name"]
    wait_until(lambda: kube.run_object(name) is not None, "the new run object", 120)
    run = kube.run_object(name)
    owners = [owner["uid"] for owner in run["metadata"].get("ownerReferences", [])]
    assert owners == [job["metadata"]["uid"]], run["metadata"]
    assert run["metadata"].get("deletionTimestamp") is None
    wait_until(lambda: len(kube.pods(name)) == nodes, "the new run's pods", 120)
    pods = kube.pods(name)
    created = moment(run["metadata"]["creationTimestamp"])
    assert all(moment(pod["metadata"]["creationTimestamp"]) >= created for pod in pods), pods


def moment(timestamp: str) -> datetime:
    """A timestamp as the API server writes it (`...Z`) or the client serializes it."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def running_pod_of(kube: Kube, name: str, job_uid: str) -> Any | None:
    """The pod of that name, if the job with that UID owns it and kwok has started its
    containers."""
    pod = kube.get("pod", name)
    if pod is None:
        return None
    owners = {owner["uid"] for owner in pod["metadata"].get("ownerReferences") or []}
    if job_uid not in owners or not pod["status"].get("containerStatuses"):
        return None
    return pod


def finish_job(cluster: Cluster, kube: Kube, api: JobApi, settings: StackSettings) -> None:
    """On kwok, report every pod of a PyTorchJob as exited 0, as a kubelet would; then wait for
    the job to succeed (on a real cluster the trainer finishes it)."""
    job_uid = kube.job(settings.job.name)["metadata"]["uid"]
    # The master last: its success is the job's, and cleanPodPolicy Running then deletes every
    # pod still running, so a worker reported after it may already be gone.
    manifest = api.job_manifest(settings, image="x")
    for replica_type, index in reversed(replica_pods(manifest)):
        if not cluster.fake_nodes:
            break
        name = f"{settings.job.name}-{replica_type.lower()}-{index}"
        # `up` returns once the job exists; on a loaded machine the operator may not have made
        # this job's pods yet (or a replaced job's pods of the same name are still going).
        wait_until(
            lambda name=name: running_pod_of(kube, name, job_uid) is not None,
            f"the job's pod {name} to run",
            120,
        )
        pod = running_pod_of(kube, name, job_uid)
        assert pod is not None
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        statuses = [
            {
                "name": status["name"],
                "image": status["image"],
                "imageID": status.get("imageID") or "",
                "ready": False,
                "restartCount": status["restartCount"],
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
            }
            for status in pod["status"]["containerStatuses"]
        ]
        kube.core.patch_namespaced_pod_status(
            name,
            NAMESPACE,
            {"status": {"phase": "Succeeded", "containerStatuses": statuses}},
        )

    def conditions() -> list[Any]:
        return (kube.job(settings.job.name).get("status") or {}).get("conditions") or []

    wait_until(
        lambda: any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions()),
        "the job to succeed",
        300,
        diagnose=lambda: f"its conditions: {conditions()}",
    )


@pytest.mark.job_api("pytorchjob")
@pytest.mark.timeout(420)
def test_metadata_change_of_a_finished_job_updates_it_promptly(
    stack: Stack, cluster: Cluster, api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    finish_job(cluster, kube, api, settings)
    uid = kube.job(settings.job.name)["metadata"]["uid"]
    stack.config_set("labels.team", "vision")
    result = stack.up()
    assert result.steps(api.resource_type) == ["update"]
    job = kube.job(settings.job.name)
    assert job["metadata"]["uid"] == uid
    assert job["metadata"]["labels"]["team"] == "vision"


@pytest.mark.job_api("trainjob")
def test_changing_the_restart_policy_is_a_new_runtime_and_a_new_trainjob(
    stack: Stack, api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    old_runtime = api.runtime_manifest(settings)["metadata"]["name"]  # type: ignore[index]
    stack.config_set("job.restartPolicy", "OnFailure")  # from the default ExitCode
    result = stack.up()
    assert "create-replacement" in result.steps(api.resource_type)
    new_runtime = api.runtime_manifest(stack.settings())["metadata"]["name"]  # type: ignore[index]
    assert new_runtime != old_runtime
    # The old runtime went once no TrainJob used it (Trainer's resource-in-use finalizer).
    assert kube.runtimes() == [new_runtime]
    job = kube.job(settings.job.name)
    assert job["spec"]["runtimeRef"]["name"] == new_runtime


# -- destroy keeps the retained claim, up again reuses it; unretained claims go -----------------


@pytest.mark.job_api("trainjob")
def test_up_right_after_destroy_waits_for_the_old_run_and_makes_its_own(
    stack: Stack, api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    stack.destroy()
    assert kube.job(settings.job.name) is None
    # At once: the garbage collector has the old JobSet and pods yet to remove.
    result = stack.up()
    assert "create" in result.steps(api.resource_type), result.output
    assert_the_run_object_is_its_own(kube, kube.job(settings.job.name), settings.job.nodes)


def test_destroy_keeps_the_retained_claim_and_up_reuses_it_with_its_data(
    stack: Stack, cluster: Cluster, api: JobApi, settings: StackSettings, kube: Kube
) -> None:
    names = resource_names(settings)
    claim = kube.claim(names.claim)
    volume = claim["spec"]["volumeName"]
    if cluster.plane is not None:
        (cluster.plane.volume_path(volume) / MARKER).write_text("epoch 6\n")

    stack.destroy()
    assert kube.job(names.job) is None
    assert kube.get("secret", names.pull_secret) is None
    if api.runtime_manifest(settings) is not None:
        assert kube.runtimes() == []
    if api.run_object is not None:
        # Deleted in the background: the run object and its pods go right after.
        wait_until(
            lambda: kube.run_object(names.job) is None and kube.pods(names.job) == [],
            "cleanup",
            120,
        )
    kept = kube.claim(names.claim)
    assert kept is not None and kept["metadata"]["uid"] == claim["metadata"]["uid"]

    stack.up()
    reused = kube.claim(names.claim)
    assert reused["metadata"]["uid"] == claim["metadata"]["uid"]
    assert reused["spec"]["volumeName"] == volume
    if cluster.plane is not None:
        assert (cluster.plane.volume_path(volume) / MARKER).read_text() == "epoch 6\n"
    assert kube.job(names.job) is not None


def test_destroy_removes_the_claim_when_retain_on_destroy_is_false(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    names = resource_names(settings)
    stack.config_set("checkpoints.retainOnDestroy", "false")
    stack.up()
    stack.destroy()
    assert kube.claim(names.claim) is None
    assert kube.job(names.job) is None
