"""Fixtures for the image tests: the training image built for real with podman (tests/containers.py
holds podman with this project's configuration, never the machine's global one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.containers import TEST_IMAGE, build_base_image, engine_env, podman_store, run_script


@pytest.fixture(scope="session", autouse=True)
def shared_podman_store() -> Iterator[None]:
    """The suite builds beside other builders, never beside a test that measures the store."""
    with podman_store(alone=False):
        yield


@pytest.fixture(scope="session")
def base_image() -> str:
    """The stand-in for the NGC base image: built once, then taken from podman's storage."""
    return build_base_image()


@pytest.fixture(scope="session")
def trainer_image(base_image: str) -> Iterator[str]:
    """The training image, built from trainer/Dockerfile on that base, as `make image` does."""
    built = run_script("build-image.sh", TEST_IMAGE, env=engine_env(BASE_IMAGE=base_image))
    assert built == TEST_IMAGE
    yield TEST_IMAGE
