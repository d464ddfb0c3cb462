"""Your model, your data, your cluster's rules (issue 30), on the control plane's real node: the
example of examples/digits as a user runs it.

- `make up` of the example's stack (tests/e2e/Pulumi.e2e-own-code.yaml) builds the user's image
  from its own context (examples/digits/Dockerfile) through the plain CLI, the Docker provider on
  podman's Docker API, and pushes it to the node's authenticated registry; the pods run the
  user's script (`torchrun train.py`), not the project's trainer;
- the node is tainted and labelled for the scenario: without the stack's toleration and node
  selector the pods stay Pending and `up` says so (job.runningTimeoutSeconds), with them they
  run there;
- the pods read the data claim `digits-data`, an existing claim of the namespace that the suite
  fills with the example's data set; read-only: a write fails;
- HF_TOKEN (job.secretEnv) is in the pods' environment, and nowhere in the stack's state, its
  outputs or its preview;
- `make checkpoint` copies the script's CHECKPOINT_DIR (no trainer manifest: copied whole, and
  said unverified); `make destroy` leaves the data claim alone.

The image's requirements (scikit-learn) are in the stand-in base image (scripts/build-base-image.sh
installs them from PyPI's wheels): the build through the Docker API then needs no network (pip
finds them satisfied), as a node's build would on a cluster's mirror.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from builders.manifests import resource_names
from cluster.real_node import RealNode
from settings.stack import PROJECT, TRAINER_UID, StackSettings
from tests.conftest import REPO_ROOT
from tests.containers import build_base_image, docker_api
from tests.e2e.conftest import (
    REAL_NODE_USER,
    Cluster,
    Project,
    Stack,
    started_real_node,
)
from tests.e2e.test_real_node import Kube, reader_pods, retrieve

# The first up pushes the 5 GB base image under the example's layers; a cold node pulls it.
pytestmark = pytest.mark.timeout(2400)

STACK = "e2e-own-code"
USERNAME = REAL_NODE_USER
EXAMPLE = REPO_ROOT / "examples" / "digits"
DATA_CLAIM = "digits-data"
TOKEN = "hf_e2e-own-code-not-real-3b9f0c"
# The scenario's taint and label on the real node (its own stay: the namespace's pods tolerate
# and select those by its annotations).
POOL_KEY = "pytorch-distributed.e2e/pool"
POOL_TAINT = {"key": POOL_KEY, "value": "digits", "effect": "NoSchedule"}
RUN_TIMEOUT_S = 900
PENDING_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def node(cluster: Cluster, real_node_registry: Path) -> Iterator[RealNode]:
    yield from started_real_node(cluster, real_node_registry)


@pytest.fixture(scope="module")
def pool(cluster: Cluster, node: RealNode) -> Iterator[None]:
    """The real node tainted and labelled for the scenario, as a cluster's GPU pool is."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api())
    current = core.read_node(node.name)
    taints = [
        {
            name: value
            for name, value in (("key", t.key), ("value", t.value), ("effect", t.effect))
            if value
        }
        for t in current.spec.taints or []
    ]
    core.patch_node(
        node.name,
        {
            "metadata": {"labels": {POOL_KEY: "digits"}},
            "spec": {"taints": [*taints, POOL_TAINT]},
        },
    )
    yield
    # The node goes with the module; this keeps a failed run's node as it was otherwise.
    core.patch_node(
        node.name, {"metadata": {"labels": {POOL_KEY: None}}, "spec": {"taints": taints}}
    )


@pytest.fixture(scope="module")
def kube(cluster: Cluster, node: RealNode) -> Kube:
    return Kube(cluster, node.namespace)


@pytest.fixture(scope="module")
def data_claim(kube: Kube, node: RealNode) -> Iterator[Any]:
    """The namespace's data set claim, which the stack mounts and never owns: the example's
    digits written into its volume as a data team would have put them there."""
    kube.core.create_namespaced_persistent_volume_claim(
        kube.namespace,
        {
            "metadata": {"name": DATA_CLAIM},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": node.storage_class,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    deadline = time.monotonic() + 60
    while (
        kube.core.read_namespaced_persistent_volume_claim(DATA_CLAIM, kube.namespace).status.phase
        != "Bound"
    ):
        assert time.monotonic() < deadline, "the data claim did not bind"
        time.sleep(0.5)
    directory = kube.claim_directory(DATA_CLAIM)
    subprocess.run(
        [sys.executable, str(EXAMPLE / "prepare_data.py"), str(directory)],
        check=True,
        timeout=120,
    )
    (directory / "digits.npz").chmod(0o644)
    directory.chmod(0o755)
    yield kube.core.read_namespaced_persistent_volume_claim(DATA_CLAIM, kube.namespace)
    kube.core.delete_namespaced_persistent_volume_claim(DATA_CLAIM, kube.namespace)


@pytest.fixture(scope="module")
def base_image() -> str:
    """The stand-in base image, which has the example's requirements (scikit-learn)."""
    return build_base_image()


@pytest.fixture(scope="module")
def engine(node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """podman's Docker API, which the stack's Docker provider builds and pushes through; the
    node's registry is plain HTTP."""
    directory = tmp_path_factory.mktemp("engine")
    conf = directory / "registries.conf"
    project_conf = REPO_ROOT / "tools" / "containers" / "registries.conf"
    conf.write_text(
        project_conf.read_text()
        + f'\n[[registry]]\nlocation = "{node.registry.address}"\ninsecure = true\n'
    )
    with docker_api(directory / "podman.sock", conf) as served:
        yield served


@pytest.fixture(scope="module")
def stack(
    project: Project,
    node: RealNode,
    pool: None,
    data_claim: Any,
    base_image: str,
    engine: Path,
) -> Iterator[Stack]:
    # The user's directory, beside the project's own (the suite's copy has the project only).
    shutil.copytree(
        EXAMPLE,
        project.work_dir / "examples" / "digits",
        ignore=shutil.ignore_patterns("__pycache__"),
        dirs_exist_ok=True,
    )
    stack = project.stack(STACK, env={"DOCKER_HOST": f"unix://{engine}"})
    stack.config_set("image.repository", f"{node.registry.address}/digits-example")
    stack.config_set("image.baseImage", base_image)
    stack.config_set("registry.server", node.registry.address)
    stack.config_set("job.secretEnv.HF_TOKEN", TOKEN, secret=True)
    yield stack
    stack.destroy(check=False)


@pytest.fixture(scope="module")
def settings(stack: Stack) -> StackSettings:
    return stack.settings()


def stack_file(stack: Stack) -> Path:
    return stack.project.work_dir / f"Pulumi.{stack.name}.yaml"


def never_plain(text: str) -> None:
    for spelling in (TOKEN, base64.b64encode(TOKEN.encode()).decode()):
        assert spelling not in text


def test_without_the_toleration_and_node_selector_the_pods_stay_pending_and_up_says_so(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    as_written = stack_file(stack).read_text()
    document = yaml.safe_load(as_written)
    job = document["config"][f"{PROJECT}:job"]
    del job["tolerations"], job["nodeSelector"]
    job["runningTimeoutSeconds"] = PENDING_TIMEOUT_S
    stack_file(stack).write_text(yaml.safe_dump(document))
    try:
        result = stack.up(check=False)
    finally:
        stack_file(stack).write_text(as_written)

    assert result.returncode != 0, result.output
    assert "did not reach Running within 1 minute" in result.output, result.output
    # The scheduler's reason, relayed per pod (Kubernetes 1.34 counts the nodes, not the taints).
    assert "had untolerated taint" in result.output, result.output
    pods = kube.pods(settings.job.name)
    assert pods, "the job's pods were not created"
    for pod in pods:
        assert pod.status.phase == "Pending" and not pod.spec.node_name
        [scheduled] = [c for c in pod.status.conditions if c.type == "PodScheduled"]
        assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")


def test_with_them_the_users_script_runs_there_reading_the_read_only_data_claim(
    stack: Stack, settings: StackSettings, kube: Kube, node: RealNode
) -> None:
    job = settings.job
    # The toleration and the node selector are a change of the job's spec: it is replaced.
    stack.up()
    master = f"{job.name}-master-0"
    pods = {pod.metadata.name: pod for pod in kube.pods(job.name)}
    assert set(pods) == {master, f"{job.name}-worker-0"}
    for pod in pods.values():
        assert pod.spec.node_name == node.name
        assert pod.spec.node_selector[POOL_KEY] == "digits"
        assert any(t.key == POOL_KEY for t in pod.spec.tolerations)
        [container] = pod.spec.containers
        assert container.command == ["torchrun"]
        assert container.args[2:] == ["train.py", "--epochs", "30", "--batch-size", "16"]
        assert pod.spec.security_context.run_as_user == TRAINER_UID
    # Inside the running master: the data is there and read-only, the secret is set.
    listing = kube.exec(master, ["ls", "/data"])
    assert "digits.npz" in listing, listing
    write = kube.exec(master, ["sh", "-c", "touch /data/written 2>&1; echo exit=$?"])
    assert "Read-only file system" in write and "exit=1" in write, write
    assert kube.exec(master, ["printenv", "HF_TOKEN"]).strip() == TOKEN
    assert kube.exec(master, ["printenv", "CHECKPOINT_DIR"]).strip() == settings.checkpoint_dir
    assert kube.exec(master, ["printenv", "STACK_NAME"]).strip() == STACK

    assert "Succeeded" in kube.wait_for_outcome(job.name)
    log = kube.log(master)
    assert "data: 1797 digits from /data/digits.npz" in log, log
    assert "HF_TOKEN is set" in log and TOKEN not in log
    assert "epoch 30/30" in log
    checkpoint = kube.claim_directory(resource_names(settings).claim) / job.name / "checkpoint.pt"
    assert torch.load(checkpoint)["epoch"] == 30


def test_the_secret_is_in_the_pods_only_never_in_state_outputs_or_preview(
    stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    never_plain(stack.cli("stack", "export").stdout)
    never_plain(stack.cli("stack", "output", "--json").stdout)
    preview = stack.preview()
    never_plain(preview.output)
    never_plain(stack_file(stack).read_text())  # the stack file holds its ciphertext
    # The one place it is: the Secret the stack owns, which the pods read by reference.
    secret = kube.core.read_namespaced_secret(f"{settings.job.name}-env", kube.namespace)
    assert base64.b64decode(secret.data["HF_TOKEN"]).decode() == TOKEN


def test_make_checkpoint_copies_the_scripts_checkpoint_dir_saying_it_is_unverified(
    stack: Stack, settings: StackSettings, kube: Kube, tmp_path: Path
) -> None:
    done = retrieve(stack, tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{settings.checkpoint_dir} has no manifest.json" in done.stdout, done.stdout
    assert "unverified" in done.stdout
    assert torch.load(tmp_path / "out" / "checkpoint.pt")["epoch"] == 30
    assert reader_pods(kube) == []


def test_destroy_leaves_the_data_claim_alone(
    stack: Stack, settings: StackSettings, kube: Kube, data_claim: Any
) -> None:
    stack.destroy()
    assert kube.job(settings.job.name) is None
    kept = kube.core.read_namespaced_persistent_volume_claim(DATA_CLAIM, kube.namespace)
    assert kept.metadata.uid == data_claim.metadata.uid
    assert (kube.claim_directory(DATA_CLAIM) / "digits.npz").is_file()
    secrets = [s.metadata.name for s in kube.core.list_namespaced_secret(kube.namespace).items]
    assert f"{settings.job.name}-env" not in secrets
