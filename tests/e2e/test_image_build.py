"""`make up` of a stack that builds the trainer image, through the real engine: the Docker provider
builds trainer/ through the Docker Engine API (podman's, here; Docker Engine for users), pushes it
to a loopback registry that requires authentication, and the job runs the digest that registry
serves. The tests run in file order on one stack.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from builders.manifests import resource_names
from components.training_image import context_tag
from tests.containers import (
    Registry,
    build_base_image,
    local_registry,
    podman,
    podman_store,
)
from tests.e2e.building import building_stack, image_engine
from tests.e2e.conftest import REGISTRY_PASSWORD, Cluster, Project, Result, Stack

# The first up pushes the whole 5 GB base image to the registry.
pytestmark = pytest.mark.timeout(1800)

NAMESPACE = "default"
REPOSITORY = "pytorch-distributed-trainer"
USERNAME = "e2e-robot"
IMAGE_TYPE = "docker:index/image:Image"
JOB_TYPE = "kubernetes:kubeflow.org/v1:PyTorchJob"


@dataclass(frozen=True)
class EngineStore:
    """What the engine's store holds: every container (buildah's working containers too) and
    every image, intermediate ones included."""

    containers: frozenset[str]
    images: frozenset[str]

    @classmethod
    def now(cls) -> EngineStore:
        listed = podman("ps", "--all", "--external", "--format", "json").stdout
        images = podman("images", "--all", "--quiet", "--no-trunc").stdout.split()
        return cls(
            frozenset(entry["Id"] for entry in json.loads(listed or "[]")), frozenset(images)
        )


@pytest.fixture(scope="module", autouse=True)
def store_to_itself() -> Iterator[None]:
    """The module compares the engine's store before and after its builds: no other build may
    run meanwhile (`make image-test`, which .ci/run runs beside `make e2e`, waits, or is waited
    for; the e2e modules that build run one after another on one worker)."""
    with podman_store(alone=True):
        yield


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with local_registry(
        tmp_path_factory.mktemp("registry"), username=USERNAME, password=REGISTRY_PASSWORD
    ) as started:
        yield started


@pytest.fixture(scope="module")
def base_image() -> str:
    """The stand-in for the NGC base image (its script installs podman where it is missing)."""
    return build_base_image()


@pytest.fixture(scope="module")
def engine(
    tmp_path_factory: pytest.TempPathFactory, registry: Registry, base_image: str
) -> Iterator[Path]:
    """The Docker Engine API the stack's provider builds and pushes through (DOCKER_HOST)."""
    with image_engine(tmp_path_factory.mktemp("engine"), registry) as served:
        yield served


@pytest.fixture(scope="module")
def stack(project: Project, registry: Registry, engine: Path, base_image: str) -> Iterator[Stack]:
    with building_stack(
        project,
        "e2e-build",
        registry=registry,
        engine=engine,
        base_image=base_image,
        repository=REPOSITORY,
    ) as stack:
        yield stack


@dataclass(frozen=True)
class FirstUp:
    result: Result
    before: EngineStore
    after: EngineStore


@pytest.fixture(scope="module")
def first_up(stack: Stack) -> FirstUp:
    before = EngineStore.now()
    result = stack.up()
    return FirstUp(result, before, EngineStore.now())


def pinned_digest(stack: Stack) -> tuple[str, str]:
    repository, _, digest = stack.outputs()["image"].partition("@")
    assert digest.startswith("sha256:"), stack.outputs()
    return repository, digest


def job(cluster: Cluster, name: str) -> dict[str, Any] | None:
    from kubernetes import client

    try:
        return client.CustomObjectsApi(cluster.api()).get_namespaced_custom_object(
            "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", name
        )
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def job_images(cluster: Cluster, name: str) -> set[str]:
    found = job(cluster, name)
    assert found is not None, f"no job {name}"
    return {
        container["image"]
        for spec in found["spec"]["pytorchReplicaSpecs"].values()
        for container in spec["template"]["spec"]["containers"]
    }


def test_up_pins_the_job_to_the_digest_the_registry_serves(
    first_up: FirstUp, stack: Stack, registry: Registry, cluster: Cluster, project: Project
) -> None:
    errors = [line for line in first_up.result.output.splitlines() if "error:" in line]
    assert errors == [], first_up.result.output
    repository, digest = pinned_digest(stack)
    assert repository == f"{registry.address}/{REPOSITORY}"
    credentials = (USERNAME, REGISTRY_PASSWORD)
    status, headers = registry.request(
        f"/v2/{REPOSITORY}/manifests/{digest}", credentials=credentials
    )
    assert status == 200 and headers["Docker-Content-Digest"] == digest
    assert registry.request(f"/v2/{REPOSITORY}/manifests/{digest}")[0] == 401
    # The tag the build pushed (named after trainer/'s content) is that manifest.
    tag = context_tag(project.work_dir / "trainer")
    assert registry.manifest_digest(REPOSITORY, tag) == digest
    assert job_images(cluster, stack.settings().job.name) == {f"{repository}@{digest}"}


def test_the_pull_secret_logs_in_to_the_registry(
    first_up: FirstUp, stack: Stack, registry: Registry, cluster: Cluster
) -> None:
    from kubernetes import client

    name = resource_names(stack.settings()).pull_secret
    assert name is not None
    secret = client.CoreV1Api(cluster.api()).read_namespaced_secret(name, NAMESPACE)
    config = json.loads(base64.b64decode(secret.data[".dockerconfigjson"]))
    entry = config["auths"][registry.address]
    username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
    _, digest = pinned_digest(stack)
    status, _ = registry.request(
        f"/v2/{REPOSITORY}/manifests/{digest}", credentials=(username, password)
    )
    assert status == 200


def test_a_build_leaves_no_working_containers_or_intermediate_images(
    first_up: FirstUp, registry: Registry, project: Project
) -> None:
    assert first_up.after.containers - first_up.before.containers == frozenset()
    tag = f"{registry.address}/{REPOSITORY}:{context_tag(project.work_dir / 'trainer')}"
    trainer_image = (
        "sha256:" + podman("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()
    )
    # The trainer image itself, nothing else (an earlier run of the suite may have built the
    # same layers already, and then nothing is new at all).
    assert first_up.after.images - first_up.before.images <= {trainer_image}
    assert trainer_image in first_up.after.images


def test_a_second_up_without_changes_builds_nothing(first_up: FirstUp, stack: Stack) -> None:
    before = EngineStore.now()
    result = stack.up()
    assert set(result.summary()) == {"same"}, result.output
    assert result.steps(IMAGE_TYPE) == ["same"]
    assert "Starting Docker build" not in result.output
    assert EngineStore.now() == before
    stack.preview("--expect-no-changes")


def test_a_trainer_change_builds_a_new_image_and_replaces_the_job(
    first_up: FirstUp, stack: Stack, registry: Registry, cluster: Cluster, project: Project
) -> None:
    _, old_digest = pinned_digest(stack)
    job_name = stack.settings().job.name
    old_job = job(cluster, job_name)
    assert old_job is not None
    changed = project.work_dir / "trainer" / "__init__.py"
    changed.write_text(changed.read_text() + "# a change under trainer/\n")
    result = stack.up()
    assert result.steps(IMAGE_TYPE) == ["update"], result.output
    job_steps = result.steps(JOB_TYPE)
    assert job_steps.index("delete-replaced") < job_steps.index("create-replacement"), job_steps
    repository, digest = pinned_digest(stack)
    assert digest != old_digest
    assert registry.manifest_digest(REPOSITORY, context_tag(project.work_dir / "trainer")) == digest
    new_job = job(cluster, job_name)
    assert new_job is not None
    assert new_job["metadata"]["uid"] != old_job["metadata"]["uid"]
    assert job_images(cluster, job_name) == {f"{repository}@{digest}"}


def test_destroy_leaves_nothing_of_the_stack_in_the_cluster(
    first_up: FirstUp, stack: Stack, registry: Registry, cluster: Cluster
) -> None:
    from kubernetes import client

    settings = stack.settings()
    names = resource_names(settings)
    _, digest = pinned_digest(stack)
    stack.destroy()
    core = client.CoreV1Api(cluster.api())
    instance = f"app.kubernetes.io/instance={names.job}"
    deadline = time.monotonic() + 120
    while True:
        left = [
            f"{kind} {item.metadata.name}"
            for kind, items in (
                ("pod", core.list_namespaced_pod(NAMESPACE).items),
                ("service", core.list_namespaced_service(NAMESPACE).items),
                ("secret", core.list_namespaced_secret(NAMESPACE, label_selector=instance).items),
                ("claim", core.list_namespaced_persistent_volume_claim(NAMESPACE).items),
            )
            for item in items
            if item.metadata.name.startswith(names.job)
        ]
        if job(cluster, names.job) is None and not left:
            break
        # The garbage collector deletes the operator's pods and services after the job.
        assert time.monotonic() < deadline, f"left after destroy: {left}"
        time.sleep(1)
    # Destroying the image does not delete the pushed tag: the registry keeps it (README).
    assert (
        registry.request(
            f"/v2/{REPOSITORY}/manifests/{digest}", credentials=(USERNAME, REGISTRY_PASSWORD)
        )[0]
        == 200
    )
