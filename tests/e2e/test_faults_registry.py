"""The registry unreachable while `make up` pushes the image it built (a stack with
`image.build: true`, through podman's Docker Engine API and an authenticated loopback registry, as
tests/e2e/test_image_build.py builds): the update fails with one line naming the registry, the
next `make up` while it is down says the same, and once it is back the next `make up` pushes
and finishes, nothing pending, nothing made twice, the job pinned to the digest it serves. What
the failed build left in the engine (the classic builder's working containers) is removed.

Nothing here compares podman's whole store (another engineer's podman may run meanwhile): only
the tags of this module's own repository are removed at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.manifests import resource_names
from components.build_leftovers import Engine, Leftovers
from components.training_image import context_tag
from tests.containers import (
    Registry,
    build_base_image,
    local_registry,
    podman,
    podman_store,
    start_registry,
    stop_registry,
)
from tests.e2e.building import building_stack, image_engine
from tests.e2e.conftest import REGISTRY_PASSWORD, Cluster, Project, Stack
from tests.e2e.faults import (
    CLAIM_TYPE,
    SEED,
    Claim,
    Kube,
    Running,
    any_object_done,
    assert_recovered,
    explained,
    seeded,
)

# The first push sends the whole base image (about 5 GB) to the module's fresh registry.
pytestmark = pytest.mark.timeout(1800)

REPOSITORY = "pytorch-distributed-faults"
USERNAME = "e2e-robot"


@pytest.fixture(scope="module", autouse=True)
def store_shared() -> Iterator[None]:
    """Builds beside other modules' (it compares nothing of the store); test_image_build, which
    compares the whole store, waits for it, and it for test_image_build."""
    with podman_store(alone=False):
        yield


@pytest.fixture(scope="module")
def registry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults-registry")


@pytest.fixture(scope="module")
def registry(registry_dir: Path) -> Iterator[Registry]:
    with local_registry(registry_dir, username=USERNAME, password=REGISTRY_PASSWORD) as started:
        yield started


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, registry: Registry) -> Iterator[Path]:
    with image_engine(tmp_path_factory.mktemp("faults-engine"), registry) as served:
        yield served


@pytest.fixture(scope="module")
def stack(project: Project, registry: Registry, engine: Path, cluster: Cluster) -> Iterator[Stack]:
    with building_stack(
        project,
        "e2e-faults-build",
        registry=registry,
        engine=engine,
        base_image=build_base_image(),
        repository=REPOSITORY,
    ) as stack:
        yield stack
    # This module's tags only (another podman user's images are none of its business).
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", check=False).stdout
    for reference in listed.split():
        if reference.startswith(f"{registry.address}/{REPOSITORY}:"):
            podman("rmi", reference, check=False)


def uploading(registry_dir: Path) -> bool:
    """A push is under way: the registry holds an upload session of the repository."""
    uploads = (
        registry_dir
        / "registry"
        / "storage"
        / "docker"
        / "registry"
        / "v2"
        / "repositories"
        / REPOSITORY
        / "_uploads"
    )
    return uploads.is_dir() and any(uploads.iterdir())


def build_engine(sock: Path) -> Engine:
    """The engine the stack's Docker provider builds through, as the build hooks see it."""
    import docker

    return Engine(docker.DockerClient(base_url=f"unix://{sock}"))


def test_the_registry_down_during_a_push(
    stack: Stack,
    registry: Registry,
    registry_dir: Path,
    engine: Path,
    cluster: Cluster,
    request: pytest.FixtureRequest,
) -> None:
    kube = Kube(cluster)
    rng = seeded(request.node.name)
    names = resource_names(stack.settings())
    store = build_engine(engine)
    before = store.contents()
    running = Running.start(stack, "up")
    running.wait_for("a Kubernetes object made", any_object_done)
    deadline = time.monotonic() + 1200
    while not uploading(registry_dir):
        assert running.popen.poll() is None, f"up ended before any push:\n{running.output()}"
        assert time.monotonic() < deadline, "no push began"
        time.sleep(0.05)
    delay = rng.uniform(0, 3)
    time.sleep(delay)
    moment = f"{delay:.2f}s into the push (seed {SEED})"
    assert not running.ended(), f"the push ended before the fault, {moment}"
    stop_registry(registry_dir / "registry", registry.address)
    try:
        first = running.result(timeout=600)
        assert first.returncode != 0, first.output
        survivors = kube.uids(names.job)
        claim = None
        if (CLAIM_TYPE, names.claim) in survivors:
            claim = Claim.mark(kube, cluster, names.claim, "epoch 1\n")
        lines = explained(first)
        assert any(f"the registry {registry.address}" in line for line in lines), first.output
        # The engine stops the program after the failed push (SIGINT from the language host):
        # it exits without the KeyboardInterrupt traceback Python would print.
        assert "KeyboardInterrupt" not in first.output and "Traceback" not in first.output
        # The image was built before the push failed: what its build left in the engine is
        # removed all the same (the error hook), only ever this build's own.
        built = f"{registry.address}/{REPOSITORY}:{context_tag(stack.project.work_dir / 'trainer')}"
        assert Leftovers.of_build(store, built, before).containers == [], "build leftovers"
        # The next `make up` while it is still down says the same.
        down = stack.up(check=False)
        assert down.returncode != 0, down.output
        assert any(f"the registry {registry.address}" in line for line in explained(down)), (
            down.output
        )
    finally:
        start_registry(registry_dir / "registry", registry.address, USERNAME, REGISTRY_PASSWORD)

    stack.up()

    assert_recovered(
        stack, kube, claim, deployed=True, survivors=survivors, context=f"registry down {moment}"
    )
    repository, _, digest = stack.outputs()["image"].partition("@")
    assert repository == f"{registry.address}/{REPOSITORY}"
    tag = context_tag(stack.project.work_dir / "trainer")
    assert registry.manifest_digest(REPOSITORY, tag) == digest
