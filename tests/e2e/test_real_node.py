"""Pods that really run: the stack's job on the control plane's real node (a kubelet with
containerd and CoreDNS, cluster/real_node.py) pulls the trainer image from an authenticated
registry with the Secret the stack created, finds the master through the operator's Service,
trains on the claim, resumes after a Kueue preemption and after destroy and up; and
`make checkpoint` (tools/retrieve.py) copies the verified checkpoints through a reader pod, after
the job finished and after destroy with the claim kept. A second stack keeps the same job's
checkpoints in object storage (`checkpoints.storage: s3`) on the suite's S3 server, which the pods
reach at the node's address: no claim, the bucket created by the trainer, the run resumed from it
after a deleted worker pod, `make checkpoint` copying from the bucket, destroy leaving its data.
A third trains under its NetworkPolicy, which the node's policy agent enforces: a pod of another
namespace cannot connect to the running master's rendezvous port until the stack turns the policy
off (issue 48).

The node's namespace enforces Pod Security "restricted" (issue 31): the pods are admitted, run as
the trainer image's non-root user with no service account token (in the live pod spec and inside
the container), and write the claim through its fsGroup; the operator's init container in the
worker is the restricted template the plane's operator runs with. A stack with `job.runAsRoot:
true` fails `up` in seconds with the API server's reason, and creates no job.

The trainer image comes from the image scripts (scripts/build-base-image.sh, cached in podman's
storage, and scripts/build-image.sh) and is pushed to the node's registry. The tests run in file
order on one stack: first a wrong password (the node has pulled nothing yet, so the pull must
reach the registry), then a run to the end, the same run preempted by Kueue in the middle, and
destroy (the claim kept) + up with more epochs.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from builders.job_apis import api_of_job
from builders.manifests import READER_MANAGER, resource_names
from cluster.control_plane import ControlPlane
from cluster.kueue_plane import (
    cluster_queue,
    create_queue_object,
    local_queue,
    workload_priority_class,
)
from cluster.real_node import POD_SECURITY_ENFORCE, RealNode
from readers.queue_state import (
    JOB_UID_LABEL,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LOCAL_QUEUE_PLURAL,
    WORKLOAD_PLURAL,
    newest_workload,
)
from settings.stack import PROJECT, TRAINER_GID, TRAINER_UID, StackSettings
from tests.conftest import committed_epochs
from tests.containers import build_base_image, engine_env, podman, run_script
from tests.e2e.conftest import (
    PASSWORD_KEY,
    REAL_NODE_USER,
    REGISTRY_PASSWORD,
    Cluster,
    Project,
    Stack,
    command_status,
    own_lines,
    started_real_node,
)
from tests.support.tensorboard import curves
from tests.support.waiting import wait_until
from tools.s3_server import S3Endpoint
from trainer.checkpoint import CheckpointError, CheckpointStore, describe
from trainer.storage import s3 as s3_backend

# A cold node pulls the whole 5 GB image once.
pytestmark = pytest.mark.timeout(1800)

STACK = "e2e-real-node"
REPOSITORY = "pytorch-distributed-trainer"
LOCAL_IMAGE = "localhost/pytorch-distributed-trainer:e2e-real-node"
USERNAME = REAL_NODE_USER
JOB_TYPE = "kubernetes:kubeflow.org/v1:PyTorchJob"
RUN_TIMEOUT_S = 600
# What `pulumi up` may take to fail on a refused pull: its own start, the objects, the operator's
# pods, the kubelet's first pull. Without the job wait it would be the wait's 30 minutes.
PULL_FAILURE_WITHIN_S = 180
# What `pulumi up` may take to fail on pods the namespace refuses: its own start, the claim and
# the secret, then one dry run of the pods (no pod, no pull).
ROOT_REFUSAL_WITHIN_S = 120
# Where the kubelet would mount the service account's token.
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def node(cluster: Cluster, real_node_registry: Path) -> Iterator[RealNode]:
    yield from started_real_node(cluster, real_node_registry)


@pytest.fixture(scope="module")
def image(node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The trainer image as the image scripts build it, pushed to the node's registry: its
    reference by the digest the registry serves."""
    base = build_base_image()
    run_script("build-image.sh", LOCAL_IMAGE, env=engine_env(BASE_IMAGE=base))
    digest_file = tmp_path_factory.mktemp("push") / "digest"
    registry = node.registry
    podman(
        "push",
        "--quiet",
        "--tls-verify=false",
        # zstd (which containerd 1.6 unpacks) pushes and unpacks the 5 GB in about half of
        # gzip's time on two cores.
        "--compression-format=zstd",
        f"--creds={registry.username}:{registry.password}",
        f"--digestfile={digest_file}",
        LOCAL_IMAGE,
        f"{registry.address}/{REPOSITORY}:e2e",
        timeout=1200,
    )
    return f"{registry.address}/{REPOSITORY}@{digest_file.read_text().strip()}"


@pytest.fixture(scope="module")
def stack(project: Project, node: RealNode, image: str) -> Iterator[Stack]:
    stack = project.stack(STACK)
    stack.config_set("image.ref", image)
    stack.config_set("registry.server", node.registry.address)
    yield stack
    stack.destroy(check=False)


@pytest.fixture(scope="module")
def settings(stack: Stack) -> StackSettings:
    return stack.settings()


class Kube:
    """The stack's namespace on the control plane, as the tests read it back."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        from kubernetes import client

        self.api = cluster.api()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.networking = client.NetworkingV1Api(self.api)
        self.namespace = namespace

    def job(self, name: str) -> dict[str, Any] | None:
        from kubernetes import client

        try:
            return self.custom.get_namespaced_custom_object(
                "kubeflow.org", "v1", self.namespace, "pytorchjobs", name
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def pods(self, job: str) -> list[Any]:
        selector = f"training.kubeflow.org/job-name={job}"
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def log(self, pod: str, *, previous: bool = False) -> str:
        """Through the API server, which reaches the kubelet only by its egress proxy."""
        return self.core.read_namespaced_pod_log(pod, self.namespace, previous=previous)

    def claim_directory(self, claim: str) -> Path:
        """Where the claim's local volume keeps its data on this machine."""
        volume = self.core.read_namespaced_persistent_volume_claim(claim, self.namespace)
        return Path(self.core.read_persistent_volume(volume.spec.volume_name).spec.local.path)

    def exec(
        self,
        pod: str,
        command: list[str],
        *,
        namespace: str | None = None,
        container: str = "pytorch",
    ) -> str:
        """A command's output in a pod's container, the training container of a pod of the
        stack's namespace by default (through the API server and the kubelet, never the pod
        network)."""
        from kubernetes.stream import stream

        return str(
            stream(
                self.core.connect_get_namespaced_pod_exec,
                pod,
                namespace or self.namespace,
                command=command,
                container=container,
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
            )
        )

    def true_conditions(self, job: str) -> set[str]:
        found = self.job(job) or {}
        conditions = (found.get("status") or {}).get("conditions") or []
        return {c["type"] for c in conditions if c["status"] == "True"}

    def wait_for_outcome(self, job: str) -> set[str]:
        """The job's true conditions once it Succeeded or Failed."""
        conditions: set[str] = set()

        def finished() -> bool:
            nonlocal conditions
            conditions = self.true_conditions(job)
            return bool(conditions & {"Succeeded", "Failed"})

        wait_until(finished, f"job {job} to finish", RUN_TIMEOUT_S, diagnose=self.diagnose(job))
        return conditions

    def diagnose(self, job: str) -> Callable[[], str]:
        def describe() -> str:
            lines = [f"job conditions: {sorted(self.true_conditions(job))}"]
            for pod in self.pods(job):
                statuses = [
                    (c.name, c.restart_count, c.state.to_dict())
                    for c in pod.status.container_statuses or []
                ]
                lines.append(f"{pod.metadata.name} {pod.status.phase} {statuses}")
            return "\n".join(lines)

        return describe


@pytest.fixture(scope="module")
def kube(cluster: Cluster, settings: StackSettings) -> Kube:
    return Kube(cluster, settings.namespace)


def assert_least_privilege(pod: Any) -> None:
    """The live pod as admitted: the non-root user and groups, and no service account token
    (no projected token volume, no mount of it)."""
    context = pod.spec.security_context
    assert context.run_as_non_root is True and context.run_as_user == TRAINER_UID, context
    assert (context.run_as_group, context.fs_group) == (TRAINER_GID, TRAINER_GID), context
    assert context.seccomp_profile.type == "RuntimeDefault", context
    assert pod.spec.automount_service_account_token is False
    assert not [v.name for v in pod.spec.volumes if v.name.startswith("kube-api-access")]
    for container in pod.spec.containers:
        assert TOKEN_DIR not in [m.mount_path for m in container.volume_mounts or []]
        assert container.security_context.capabilities.drop == ["ALL"]


def inspect_checkpoints(project: Project, directory: Path) -> dict[str, Any]:
    """`.venv/bin/python -m trainer.checkpoint DIR`, what a user runs on the claim."""
    done = project.run([".venv/bin/python", "-m", "trainer.checkpoint", str(directory)])
    return json.loads(done.stdout)


def job_urn(stack: Stack) -> str:
    state = json.loads(stack.cli("stack", "export").stdout)
    resources = state["deployment"]["resources"]
    return next(r["urn"] for r in resources if r["type"] == JOB_TYPE)


# Filled in by the uninterrupted run, compared against by the interrupted one.
UNINTERRUPTED: dict[str, str] = {}


def test_a_wrong_registry_password_fails_up_with_the_pull_error(
    stack: Stack, settings: StackSettings, node: RealNode, kube: Kube
) -> None:
    assert not [ref for ref in node.images() if REPOSITORY in ref], (
        "the node already holds the trainer image, so no pull would reach the registry"
    )
    # One pod: a worker would wait in the operator's init container (a shell loop, PID 1, that
    # ignores SIGTERM) for a master that never runs, and make destroy wait its grace period.
    stack.config_set("job.nodes", "1")
    stack.cli("config", "set", "--secret", PASSWORD_KEY, "wrong-e2e-registry-password")
    started = time.monotonic()
    result = stack.up(check=False)
    took = time.monotonic() - started

    assert result.returncode != 0, result.output
    assert took < PULL_FAILURE_WITHIN_S, f"up took {took:.0f}s to fail\n{result.output}"
    assert f"/{settings.job.name}: a pod cannot start" in result.output, result.output
    # containerd's own words for the registry's refusal of the credential, via the kubelet.
    assert "401 Unauthorized" in result.output, result.output
    (pod,) = kube.pods(settings.job.name)
    (status,) = pod.status.container_statuses
    assert status.state.waiting.reason in {"ErrImagePull", "ImagePullBackOff"}, status

    stack.destroy()
    stack.cli("config", "set", "--secret", PASSWORD_KEY, REGISTRY_PASSWORD)
    stack.config_set("job.nodes", str(settings.job.nodes))


def test_pods_pull_with_the_secret_find_the_master_and_train_to_the_end(
    stack: Stack, settings: StackSettings, kube: Kube, image: str
) -> None:
    job = settings.job
    stack.up()  # waits until the job runs (or already succeeded)
    assert kube.true_conditions(job.name) & {"Running", "Succeeded"}
    # Under its NetworkPolicy, which the node's agent enforces: the pods reach each other.
    policies = kube.networking.list_namespaced_network_policy(kube.namespace).items
    assert [p.metadata.name for p in policies] == [f"{job.name}-network"]

    assert "Succeeded" in kube.wait_for_outcome(job.name)
    pods = {pod.metadata.name: pod for pod in kube.pods(job.name)}
    master, worker = f"{job.name}-master-0", f"{job.name}-worker-0"
    assert set(pods) == {master, worker}
    for pod in pods.values():
        assert pod.spec.node_name == "real-node"
        assert pod.spec.image_pull_secrets[0].name == resource_names(settings).pull_secret
        (status,) = pod.status.container_statuses
        assert status.image_id.endswith(image.partition("@")[2]), status.image_id
        assert status.state.terminated.exit_code == 0
        assert_least_privilege(pod)
    # The worker's init container (the operator's) was admitted under "restricted" too.
    (init,) = pods[worker].spec.init_containers
    assert init.security_context.allow_privilege_escalation is False
    # The worker reached the master by the name of its Service, through the cluster DNS.
    assert f"master={master}:" in kube.log(worker)
    assert f"epoch {job.total_epochs}/{job.total_epochs}" in kube.log(master)

    checkpoints = kube.claim_directory(resource_names(settings).claim) / job.name
    described = inspect_checkpoints(stack.project, checkpoints)
    assert described["epochs_completed"] == job.total_epochs
    assert described["world_size"] == 2
    # Written by the image's non-root user, on a claim the kubelet gave to the pods' fsGroup.
    assert (checkpoints / "manifest.json").stat().st_uid == TRAINER_UID
    assert checkpoints.parent.stat().st_gid == TRAINER_GID
    # TensorBoard's event files, written by the pod into the run's directory: every step once.
    steps = job.total_epochs * -(-job.dataset_size // (job.batch_size * job.nodes))
    scalars = curves(checkpoints / "tensorboard")
    assert [step for step, _ in scalars["loss/step"]] == list(range(1, steps + 1))
    assert len(scalars["loss/epoch"]) == job.total_epochs
    UNINTERRUPTED["model_sha256"] = described["model_sha256"]
    UNINTERRUPTED["directory"] = str(checkpoints)


# -- Kueue: a preempted job checkpoints, and resumes when admitted again ------------------------

NODE_QUEUE = "node"
# The high job's LocalQueue, held (stopPolicy Hold) until the low job has a checkpoint: then
# releasing it makes Kueue preempt the low job at once, wherever the machine's load has it.
HIGH_QUEUE = "node-high"
NODE_CLUSTER_QUEUE = "e2e-real-node"
HIGH_STACK = "e2e-real-node-high"
HIGH_JOB = "ddp-high"


def test_a_job_preempted_by_kueue_resumes_when_admitted_again_to_the_same_weights(
    project: Project,
    stack: Stack,
    settings: StackSettings,
    kube: Kube,
    cluster: Cluster,
    node: RealNode,
    kueue: ControlPlane,
) -> None:
    if not UNINTERRUPTED:
        pytest.skip("needs the uninterrupted run of the tests before")
    job = settings.job
    api = cluster.api()
    # Quota for the low job's two pods (job.cpu, job.memory each), so the high one's pod fits
    # only once the low job is preempted.
    create_queue_object(api, cluster_queue(NODE_CLUSTER_QUEUE, {"cpu": "1", "memory": "4Gi"}))
    create_queue_object(api, local_queue(kube.namespace, NODE_QUEUE, NODE_CLUSTER_QUEUE))
    create_queue_object(
        api, local_queue(kube.namespace, HIGH_QUEUE, NODE_CLUSTER_QUEUE, stop_policy="Hold")
    )
    create_queue_object(api, workload_priority_class("low", 100))
    create_queue_object(api, workload_priority_class("high", 1000))
    checkpoints = Path(UNINTERRUPTED["directory"])
    checkpoints.rename(checkpoints.with_name(f"{job.name}-before-preemption"))
    stack.config_set("job.queue", NODE_QUEUE)
    stack.config_set("job.priorityClass", "low")
    high = project.stack(HIGH_STACK)
    high.config_set("image.ref", stack.config()[f"{PROJECT}:image"]["ref"])
    high.config_set("registry.server", node.registry.address)
    try:
        high_result = high.up()  # created, and queued in the held LocalQueue
        show_output("make up (the high job)", high_result.output)
        assert not kube.pods(HIGH_JOB)
        result = stack.up("--replace", job_urn(stack))  # admitted at once: the high one is held
        assert "admitted by LocalQueue node (ClusterQueue e2e-real-node)" in result.output
        wait_until(
            lambda: committed_epochs(checkpoints) >= 1,
            "the low job's first checkpoint",
            RUN_TIMEOUT_S,
            diagnose=kube.diagnose(job.name),
        )
        kube.custom.patch_namespaced_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            kube.namespace,
            LOCAL_QUEUE_PLURAL,
            HIGH_QUEUE,
            {"spec": {"stopPolicy": "None"}},
        )
        # Kueue suspends the low job to admit the high one: its pods are deleted (SIGTERM, and
        # the trainer's checkpoint within the grace period).
        wait_until(
            lambda: "Preempted" in evictions(queue_workload(kube, kube.job(job.name))),
            "Kueue to preempt the low job",
            RUN_TIMEOUT_S,
            diagnose=kube.diagnose(job.name),
        )
        assert "Succeeded" in kube.wait_for_outcome(HIGH_JOB)
        assert "Succeeded" in kube.wait_for_outcome(job.name)
        master_log = kube.log(f"{job.name}-master-0")
        assert "resuming from /checkpoints/" in master_log, master_log
        described = inspect_checkpoints(stack.project, checkpoints)
        assert described["epochs_completed"] == job.total_epochs
        assert described["model_sha256"] == UNINTERRUPTED["model_sha256"]
    finally:
        high.destroy(check=False)
        stack.cli("config", "rm", "--path", f"{PROJECT}:job.queue", check=False)
        stack.cli("config", "rm", "--path", f"{PROJECT}:job.priorityClass", check=False)


def evictions(workload: dict[str, Any]) -> list[str]:
    """The reasons Kueue evicted the workload for, as its scheduling stats count them."""
    stats = (workload.get("status") or {}).get("schedulingStats") or {}
    return [eviction["reason"] for eviction in stats.get("evictions") or []]


def queue_workload(kube: Kube, job: dict[str, Any] | None) -> dict[str, Any]:
    assert job is not None, "the job is gone"
    listed = kube.custom.list_namespaced_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        kube.namespace,
        WORKLOAD_PLURAL,
        label_selector=f"{JOB_UID_LABEL}={job['metadata']['uid']}",
    )
    workload = newest_workload(listed.get("items") or [])
    assert workload is not None, "Kueue made no Workload for the job"
    return dict(workload)


def show_output(title: str, text: str) -> None:
    """Shown with `pytest -s`."""
    print(f"\n===== {title} =====\n{text}")


def test_destroy_keeps_the_claim_and_up_with_more_epochs_resumes_from_it(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    job, names = settings.job, resource_names(settings)
    claim = kube.core.read_namespaced_persistent_volume_claim(names.claim, kube.namespace)
    checkpoints = kube.claim_directory(names.claim) / job.name
    assert committed_epochs(checkpoints) == job.total_epochs

    stack.destroy()
    assert kube.job(job.name) is None
    kept = kube.core.read_namespaced_persistent_volume_claim(names.claim, kube.namespace)
    assert kept.metadata.uid == claim.metadata.uid

    more = job.total_epochs + 2
    stack.config_set("job.totalEpochs", str(more))
    stack.up()
    assert "Succeeded" in kube.wait_for_outcome(job.name)
    master_log = kube.log(f"{job.name}-master-0")
    resumed = [line for line in master_log.splitlines() if "resuming from" in line]
    assert resumed and f"({job.total_epochs} epochs completed)" in resumed[0], master_log
    assert inspect_checkpoints(stack.project, checkpoints)["epochs_completed"] == more


def retrieve(stack: Stack, out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`make checkpoint STACK=... OUT=... RETRIEVE_ARGS=...` in the suite's checkout."""
    return stack.checkpoint(out, *flags)


def reader_pods(kube: Kube) -> list[str]:
    selector = f"app.kubernetes.io/managed-by={READER_MANAGER}"
    pods = kube.core.list_namespaced_pod(kube.namespace, label_selector=selector).items
    return [pod.metadata.name for pod in pods]


def assert_retrieved(project: Project, out: Path, claim_directory: Path) -> None:
    """The newest committed checkpoint, its manifest and metrics, the sha256 the manifest
    records, and every epoch in what `python -m trainer.checkpoint OUT` shows."""
    newest = CheckpointStore(claim_directory).manifest()[-1]
    copied = out / newest.file
    assert copied.is_file(), sorted(p.name for p in out.iterdir())
    assert (out / "manifest.json").is_file() and (out / "metrics.jsonl").is_file()
    assert hashlib.sha256(copied.read_bytes()).hexdigest() == newest.sha256
    described = inspect_checkpoints(project, out)
    assert described["epochs_completed"] == newest.epochs_completed
    assert described["path"] == str(copied)


def test_make_checkpoint_copies_the_final_checkpoint_of_a_finished_job(
    stack: Stack, settings: StackSettings, kube: Kube, tmp_path: Path
) -> None:
    claim_directory = kube.claim_directory(resource_names(settings).claim) / settings.job.name
    assert kube.true_conditions(settings.job.name) & {"Succeeded"}, "needs the finished job"
    done = retrieve(stack, tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "python -m trainer.plot" in done.stdout, done.stdout
    assert_retrieved(stack.project, tmp_path / "out", claim_directory)
    assert reader_pods(kube) == []


def test_make_checkpoint_after_destroy_reads_the_kept_claim_with_a_named_image(
    stack: Stack, settings: StackSettings, kube: Kube, image: str, tmp_path: Path
) -> None:
    claim_directory = kube.claim_directory(resource_names(settings).claim) / settings.job.name
    stack.destroy()
    assert kube.job(settings.job.name) is None
    # No job, no image to take from it: without --image the tool says so and creates nothing.
    refused = retrieve(stack, tmp_path / "refused")
    assert command_status(refused) == 2, refused.stdout + refused.stderr
    [line] = own_lines(refused.stderr)
    assert "--image" in line, refused.stderr
    assert reader_pods(kube) == []
    # The trainer image, which the node holds since the job pulled it (the pull secret is gone
    # with the stack).
    done = retrieve(stack, tmp_path / "out", "--image", image)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_retrieved(stack.project, tmp_path / "out", claim_directory)
    assert reader_pods(kube) == []


def test_make_checkpoint_with_a_wrong_stack_or_a_missing_claim_creates_nothing(
    stack: Stack, kube: Kube, tmp_path: Path
) -> None:
    no_stack = stack.project.make("checkpoint", check=False, STACK="no-such-stack")
    assert command_status(no_stack) == 2, no_stack.stderr
    [line] = own_lines(no_stack.stderr)
    assert "no-such-stack" in line, no_stack.stderr
    stack.config_set("checkpoints.existingClaim", "no-such-claim")
    try:
        missing = retrieve(stack, tmp_path / "out")
    finally:
        stack.cli("config", "rm", "--path", f"{PROJECT}:checkpoints.existingClaim")
    assert command_status(missing) == 2, missing.stdout + missing.stderr
    [line] = own_lines(missing.stderr)
    assert "no-such-claim" in line, missing.stderr
    assert reader_pods(kube) == []
    assert not (tmp_path / "out").exists()


def test_a_stack_that_runs_as_root_fails_up_at_once_with_the_api_servers_reason(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    """The namespace enforces "restricted": the pods' dry run is refused before the job is
    created, in one line that carries Pod Security's own words."""
    namespace = kube.core.read_namespace(kube.namespace)
    assert namespace.metadata.labels[POD_SECURITY_ENFORCE] == "restricted"
    stack.config_set("job.runAsRoot", "true")
    try:
        started = time.monotonic()
        result = stack.up(check=False)
        took = time.monotonic() - started
    finally:
        stack.cli("config", "rm", "--path", f"{PROJECT}:job.runAsRoot")
    assert result.returncode != 0, result.output
    assert took < ROOT_REFUSAL_WITHIN_S, f"up took {took:.0f}s to fail\n{result.output}"
    # The reason in one line (the CLI may repeat it in its summary), naming what "restricted"
    # refuses of a root pod.
    lines = [line for line in result.output.splitlines() if "violates PodSecurity" in line]
    assert lines, result.output
    for line in lines:
        assert f"/{settings.job.name}: the namespace refuses its pods" in line, result.output
        assert "runAsNonRoot" in line and "runAsUser=0" in line, line
    assert kube.job(settings.job.name) is None  # nothing to clean up after
    stack.destroy()


# -- checkpoints in object storage (issue 33) ---------------------------------------------------

# -- The job's network: only its own pods reach its rendezvous -----------------------------------

NETWORK_STACK = "e2e-real-node-network"
PROBE_NAMESPACE = "real-node-probe"
PROBE_POD = "probe"
# A connection the node's policy agent drops never completes: its SYN goes unanswered.
CONNECT_TIMEOUT_S = 5
CONNECT = f"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout={CONNECT_TIMEOUT_S})
    print("connected")
except TimeoutError:
    print("timed out")
except OSError as error:
    print(f"failed: {{error}}")
"""


def connect(kube: Kube, pod: str, address: str, port: int, *, namespace: str | None = None) -> str:
    """Whether `pod` (the job's training container, or the probe's) connects to address:port:
    `connected`, `timed out` (dropped) or `failed: ...` (e.g. refused: nothing listens)."""
    container = "pytorch" if namespace is None else PROBE_POD
    command = ["python3", "-c", CONNECT, address, str(port)]
    return kube.exec(pod, command, namespace=namespace, container=container).strip()


@pytest.fixture
def probe(kube: Kube, image: str) -> Iterator[str]:
    """A pod of another namespace on the real node, of the trainer image (already on the node,
    so no pull and no Secret), that only sleeps: the tests connect from it through exec. Its
    namespace is placed on the node as the node's own is (the same annotations), under the same
    Pod Security level."""
    node_namespace = kube.core.read_namespace(kube.namespace).metadata
    kube.core.create_namespace(
        {
            "metadata": {
                "name": PROBE_NAMESPACE,
                "labels": {POD_SECURITY_ENFORCE: "restricted"},
                "annotations": node_namespace.annotations,
            }
        }
    )
    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": TRAINER_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod = {
        "metadata": {"name": PROBE_POD},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": PROBE_POD,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                    "securityContext": restricted,
                }
            ],
        },
    }
    try:
        kube.core.create_namespaced_pod(PROBE_NAMESPACE, pod)

        def running() -> bool:
            found = kube.core.read_namespaced_pod(PROBE_POD, PROBE_NAMESPACE)
            return found.status.phase == "Running"

        wait_until(running, "the probe pod to run", RUN_TIMEOUT_S)
        yield PROBE_POD
    finally:
        kube.core.delete_namespace(PROBE_NAMESPACE, grace_period_seconds=0)

        def gone() -> bool:
            names = [n.metadata.name for n in kube.core.list_namespace().items]
            return PROBE_NAMESPACE not in names

        wait_until(gone, "the probe's namespace to go", RUN_TIMEOUT_S)


def test_only_the_jobs_own_pods_reach_its_rendezvous_until_the_stack_turns_the_policy_off(
    project: Project, node: RealNode, image: str, kube: Kube, probe: str
) -> None:
    """The node's policy agent (kube-network-policies, cluster/real_node.py) enforces the stack's
    NetworkPolicy: while the job trains (its commits held after the first, so that its master
    stays up), its worker reaches the master's rendezvous port and the probe of another namespace
    does not; `network.policy: false` and `make up` delete the policy alone (the same pods run
    on) and the probe connects, so the refusal was the policy's."""
    stack = project.stack(NETWORK_STACK)
    try:
        stack.config_set("image.ref", image)
        stack.config_set("registry.server", node.registry.address)
        settings = stack.settings()
        name = settings.job.name
        stack.up()
        policies = kube.networking.list_namespaced_network_policy(kube.namespace).items
        assert f"{name}-network" in [p.metadata.name for p in policies]
        claim = kube.claim_directory(resource_names(settings).claim) / name
        wait_until(
            lambda: committed_epochs(claim) >= 1,
            "the job's first checkpoint: its worker joined the master",
            RUN_TIMEOUT_S,
            diagnose=kube.diagnose(name),
        )
        master = kube.core.read_namespaced_pod(f"{name}-master-0", kube.namespace)
        job = kube.job(name)
        assert job is not None
        address, port = master.status.pod_ip, api_of_job(job).master_port(job)
        assert connect(kube, f"{name}-worker-0", address, port) == "connected"
        assert connect(kube, probe, address, port, namespace=PROBE_NAMESPACE) == "timed out"

        stack.config_set("network.policy", "false")
        stack.up()
        policies = kube.networking.list_namespaced_network_policy(kube.namespace).items
        assert f"{name}-network" not in [p.metadata.name for p in policies]
        again = kube.core.read_namespaced_pod(f"{name}-master-0", kube.namespace)
        assert again.metadata.uid == master.metadata.uid  # the job was left alone
        wait_until(
            lambda: connect(kube, probe, address, port, namespace=PROBE_NAMESPACE) == "connected",
            "the probe to connect once the policy is gone",
            60,
        )
    finally:
        stack.destroy(check=False)


S3_STACK = "e2e-real-node-s3"


def committed_in(root: str) -> int:
    """The newest committed checkpoint's epochs in a run's bucket (0 before the first)."""
    try:
        entries = CheckpointStore(root).manifest()
    except (CheckpointError, OSError):
        return 0
    return entries[-1].epochs_completed if entries else 0


def test_an_s3_stack_trains_into_its_bucket_resumes_from_it_and_destroy_leaves_its_data(
    project: Project,
    node: RealNode,
    image: str,
    kube: Kube,
    s3_server: S3Endpoint,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The suite's S3 server (tools/s3_server.py) on this machine's loopback, which the pods reach
    at the node's address: no claim; the trainer creates the bucket and trains a sharded model
    (FSDP) into it, each rank uploading its own shards, and after a deleted worker pod (the
    operator makes a new one) resumes from them to the end; `make checkpoint` copies the sharded
    checkpoint from the bucket here, every file verified, with the key and endpoint a user
    exports; destroy leaves the data. (The claim's resume on real pods, bit for bit: the
    preemption and destroy-and-up scenarios; FSDP's bitwise and resharded resumes from a bucket:
    tests/trainer/storage/test_s3_fsdp.py.)"""
    port = int(s3_server.url.rpartition(":")[2])
    pods_endpoint = node.expose_to_pods(port)
    here = {
        "AWS_ENDPOINT_URL_S3": s3_server.url,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
    }
    stack = project.stack(S3_STACK, env=here)
    try:
        stack.config_set("image.ref", image)
        stack.config_set("registry.server", node.registry.address)
        stack.config_set("checkpoints.endpoint", pods_endpoint)
        stack.config_set("checkpoints.accessKeyId", s3_server.access_key, secret=True)
        stack.config_set("checkpoints.secretAccessKey", s3_server.secret_key, secret=True)
        settings = stack.settings()
        job, root = settings.job, settings.checkpoint_dir
        assert root == f"s3://e2e-checkpoints/real-node/{job.name}"
        for name, value in s3_server.environment().items():
            monkeypatch.setenv(name, value)
        s3_backend.forget_clients()

        stack.up()
        assert resource_names(settings).claim is None
        claims = kube.core.list_namespaced_persistent_volume_claim(kube.namespace).items
        assert not [c.metadata.name for c in claims if job.name in c.metadata.name]
        wait_until(
            lambda: committed_in(root) >= 1,
            "the first checkpoint in the bucket",
            RUN_TIMEOUT_S,
            diagnose=kube.diagnose(job.name),
        )
        # Inside the running master: the image's non-root user, and no token to find.
        probe = f"id -u; id -G; if [ -e {TOKEN_DIR} ]; then echo token; else echo no-token; fi"
        inside = kube.exec(f"{job.name}-master-0", ["sh", "-c", probe]).splitlines()
        assert inside[0] == str(TRAINER_UID) and inside[-1] == "no-token", inside
        assert str(TRAINER_GID) in inside[1].split(), inside
        worker = f"{job.name}-worker-0"
        (first,) = [pod for pod in kube.pods(job.name) if pod.metadata.name == worker]
        kube.core.delete_namespaced_pod(worker, kube.namespace)
        deleted_at = committed_in(root)
        assert "Succeeded" in kube.wait_for_outcome(job.name)
        assert deleted_at < job.total_epochs, "the run ended before the worker pod was deleted"
        (second,) = [pod for pod in kube.pods(job.name) if pod.metadata.name == worker]
        assert second.metadata.uid != first.metadata.uid  # the operator made a new pod
        assert f"resuming from {root}/" in kube.log(f"{job.name}-master-0")
        newest = CheckpointStore(root).manifest()[-1]
        assert newest.epochs_completed == job.total_epochs
        assert newest.files is not None and newest.world_size == job.nodes  # every rank's shards
        described = describe(root)  # its shards, consolidated into the whole model
        assert (described["layout"], described["world_size"]) == ("sharded", job.nodes)

        done = stack.checkpoint(tmp_path / "out")
        assert done.returncode == 0, done.stdout + done.stderr
        CheckpointStore(tmp_path / "out").verify(newest)  # every file, by its sha256
        assert reader_pods(kube) == []

        stack.destroy()
        assert kube.job(job.name) is None
        assert CheckpointStore(root).manifest()[-1] == newest  # the bucket's data stays
    finally:
        stack.destroy(check=False)


def test_the_node_leaves_nothing_behind(cluster: Cluster, node: RealNode, stack: Stack) -> None:
    """Its containers, shims, mounts, namespaces and cgroups go with it (the fixture's exit
    stops it again, which does nothing then)."""
    stack.destroy()
    node.stop()
    assert node.leftovers() == []
    assert cluster.plane is not None
    from kubernetes import client

    names = [n.metadata.name for n in client.CoreV1Api(cluster.api()).list_node().items]
    assert "real-node" not in names
