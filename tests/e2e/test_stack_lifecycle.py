"""The stack's whole life through the real engine: preview, up, no drift, secrets, replace, update,
destroy and up again on the kept checkpoints. The tests run in file order on one stack.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from components.job_apis import job_api
from components.job_apis.pytorchjob import (
    injected_env,
    pytorchjob_manifest,
    replica_pods,
    training_container,
)
from components.manifests import (
    READER_MANAGER,
    checkpoint_claim_manifest,
    registry_secret_manifest,
    resource_names,
)
from components.settings import PROJECT, StackSettings
from tests.e2e.conftest import (
    REGISTRY_PASSWORD,
    Cluster,
    Project,
    Stack,
    command_status,
    own_lines,
)
from tests.e2e.kube import NamespaceObjects
from tests.support.waiting import wait_until

NAMESPACE = "default"
PYTORCHJOB = job_api("pytorchjob")
JOB_TYPE = PYTORCHJOB.resource_type
# A file a previous run left on the claim: it must survive destroy and be there for the next up.
MARKER = "snapshot-from-an-earlier-run.txt"


@pytest.fixture(scope="module")
def stack(project: Project) -> Stack:
    return project.stack("e2e")


@pytest.fixture(scope="module")
def settings(stack: Stack) -> StackSettings:
    return stack.settings()


class Kube(NamespaceObjects):
    def job(self, name: str) -> Any | None:
        return self.custom_object(PYTORCHJOB.group, PYTORCHJOB.version, PYTORCHJOB.plural, name)


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster, NAMESPACE)


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


# -- a. preview with the policy pack ------------------------------------------------------------


def test_preview_with_policy_pack_passes(stack: Stack) -> None:
    result = stack.preview()
    # Provider, claim, secret, job, five components and the stack itself.
    assert result.summary() == {"create": 10}, result.output
    assert "pytorch-distributed-guardrails" in result.output, result.output
    assert "Traceback" not in result.output
    # The language host sits next to the CLI and the providers are installed plugins, as in a
    # user's installation: the CLI finds no plugin on PATH to warn about.
    assert "from $PATH" not in result.output, result.output


def test_policy_pack_blocks_a_violating_change(stack: Stack) -> None:
    stack.config_set("checkpoints.accessMode", "ReadWriteOnce")
    try:
        result = stack.preview(check=False)
        assert result.returncode != 0
        assert "checkpoint-claim-protection" in result.output
        assert "mandatory" in result.output
    finally:
        stack.config_set("checkpoints.accessMode", "ReadWriteMany")


# -- g. a bad value fails before anything is registered -----------------------------------------


def test_bad_config_value_fails_preview_with_one_line_naming_the_key(stack: Stack) -> None:
    stack.config_set("job.batchSize", "0")
    try:
        result = stack.preview(check=False)
        assert result.returncode != 0
        error_lines = [line for line in result.output.splitlines() if "invalid config" in line]
        assert error_lines, result.output
        assert f"invalid config {PROJECT}:job.batchSize = 0" in error_lines[0]
        assert "Traceback" not in result.output
        # The engine registers the stack itself before the program runs; nothing else may be.
        registered = [urn for urn in result.registered() if "pulumi:pulumi:Stack" not in urn]
        assert registered == [], "a resource was registered despite the bad value"
    finally:
        stack.config_set("job.batchSize", "32")


# -- b. up creates what the builders describe ---------------------------------------------------


def test_up_creates_secret_claim_and_job_as_the_builders_describe(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    result = stack.up()
    assert result.summary() == {"create": 10}, result.output
    names = resource_names(settings)

    secret = kube.get("secret", names.pull_secret)
    expected_secret = registry_secret_manifest(settings, password=REGISTRY_PASSWORD)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert contains(secret["metadata"], expected_secret["metadata"]) == []
    stored = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    built = json.loads(base64.b64decode(expected_secret["data"][".dockerconfigjson"]))
    assert stored == built

    claim = kube.get("persistent_volume_claim", names.claim)
    assert contains(claim, checkpoint_claim_manifest(settings)) == []
    assert claim["status"]["phase"] == "Bound"

    job = kube.job(names.job)
    assert job is not None
    expected_job = pytorchjob_manifest(settings, image=settings.image.ref)
    assert contains(job, expected_job) == []


def test_operator_creates_pods_and_services_with_the_emulated_environment(
    settings: StackSettings, kube: Kube
) -> None:
    manifest = pytorchjob_manifest(settings, image=settings.image.ref)
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


def test_up_with_wait_for_running_returns_once_the_pods_run(
    cluster: Cluster, settings: StackSettings, kube: Kube
) -> None:
    # On kwok the pods run until told otherwise; on a real cluster the small job may be done.
    reached = {"Running"} if cluster.fake_nodes else {"Running", "Succeeded"}
    job = kube.job(settings.job.name)
    true = {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"}
    assert true & reached, job["status"]["conditions"]
    for replica_type, index in replica_pods(pytorchjob_manifest(settings, image="x")):
        pod = kube.get("pod", f"{settings.job.name}-{replica_type.lower()}-{index}")
        assert pod["status"]["phase"] in reached


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


# -- c. no changes right after up ---------------------------------------------------------------


def test_preview_right_after_up_expects_no_changes(stack: Stack) -> None:
    stack.preview("--expect-no-changes")


def test_refresh_finds_no_drift(stack: Stack) -> None:
    stack.cli("refresh", "--yes", "--expect-no-changes")


# -- d. the registry password never appears in plain text ---------------------------------------


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


# -- e. a spec change replaces the job; a metadata change updates it promptly -------------------


def test_changing_total_epochs_replaces_the_job_deleting_the_old_one_first(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    old_uid = kube.job(settings.job.name)["metadata"]["uid"]
    stack.config_set("job.totalEpochs", str(settings.job.total_epochs + 2))
    result = stack.up()
    job_steps = result.steps(JOB_TYPE)
    assert job_steps.index("delete-replaced") < job_steps.index("create-replacement"), job_steps
    job = kube.job(settings.job.name)
    assert job["metadata"]["uid"] != old_uid
    longer = replace(
        settings, job=replace(settings.job, total_epochs=settings.job.total_epochs + 2)
    )
    assert contains(job, pytorchjob_manifest(longer, image=settings.image.ref)) == []


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


def finish_job(cluster: Cluster, kube: Kube, settings: StackSettings) -> None:
    """On kwok, report every pod as exited 0, as a kubelet would; then wait for the job to
    succeed (on a real cluster the trainer finishes it)."""
    job_uid = kube.job(settings.job.name)["metadata"]["uid"]
    # The master last: its success is the job's, and cleanPodPolicy Running then deletes every
    # pod still running, so a worker reported after it may already be gone.
    for replica_type, index in reversed(replica_pods(pytorchjob_manifest(settings, image="x"))):
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


@pytest.mark.timeout(420)
def test_metadata_change_of_a_finished_job_updates_it_promptly(
    stack: Stack, cluster: Cluster, settings: StackSettings, kube: Kube
) -> None:
    finish_job(cluster, kube, settings)
    uid = kube.job(settings.job.name)["metadata"]["uid"]
    stack.config_set("labels.team", "vision")
    result = stack.up()
    assert result.steps(JOB_TYPE) == ["update"]
    job = kube.job(settings.job.name)
    assert job["metadata"]["uid"] == uid
    assert job["metadata"]["labels"]["team"] == "vision"


# -- f. destroy keeps the retained claim, up again reuses it; unretained claims go --------------


def test_destroy_keeps_the_retained_claim_and_up_reuses_it_with_its_data(
    stack: Stack, cluster: Cluster, settings: StackSettings, kube: Kube
) -> None:
    names = resource_names(settings)
    claim = kube.get("persistent_volume_claim", names.claim)
    volume = claim["spec"]["volumeName"]
    if cluster.plane is not None:
        (cluster.plane.volume_path(volume) / MARKER).write_text("epoch 6\n")

    stack.destroy()
    assert kube.job(names.job) is None
    assert kube.get("secret", names.pull_secret) is None
    kept = kube.get("persistent_volume_claim", names.claim)
    assert kept is not None and kept["metadata"]["uid"] == claim["metadata"]["uid"]

    stack.up()
    reused = kube.get("persistent_volume_claim", names.claim)
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
    assert kube.get("persistent_volume_claim", names.claim) is None
    assert kube.job(names.job) is None
