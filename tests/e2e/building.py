"""What the e2e modules that build the image share (test_image_build, test_faults_registry): the
engine the stack's Docker provider builds and pushes through (podman's Docker API, DOCKER_HOST),
and a stack that builds into a registry on this machine's loopback."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers import Registry, docker_api
from tests.e2e.conftest import Project, Stack


@contextlib.contextmanager
def image_engine(directory: Path, registry: Registry) -> Iterator[Path]:
    """The Docker Engine API on a socket in `directory`, its pushes trusting `registry`."""
    with docker_api(directory / "podman.sock", registry.registries_conf) as served:
        yield served


@contextlib.contextmanager
def building_stack(
    project: Project,
    name: str,
    *,
    registry: Registry,
    engine: Path,
    base_image: str,
    repository: str,
) -> Iterator[Stack]:
    """Stack `name` building its image on `engine` from `base_image` into `registry`'s
    `repository`; destroyed at the end, whatever happened."""
    if os.environ.get("PD_E2E_KUBECONFIG"):
        pytest.skip("an external cluster: its nodes cannot pull from this machine's loopback")
    stack = project.stack(name, env={"DOCKER_HOST": f"unix://{engine}"})
    stack.config_set("image.repository", f"{registry.address}/{repository}")
    stack.config_set("image.baseImage", base_image)
    stack.config_set("registry.server", registry.address)
    try:
        yield stack
    finally:
        stack.destroy(check=False)
