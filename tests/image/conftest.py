"""Fixtures for the image tests: the training image built for real with podman, and podman itself
with this project's configuration (tools/containers/), never the machine's global one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tools import container_backend

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_IMAGE = "localhost/pytorch-distributed-trainer:test"
# What scripts/container-env.sh defaults to, and the Makefile passes on.
RUNTIME = os.environ.get("CONTAINER_RUNTIME", "runc")
ENGINE = container_backend.Engine("podman", RUNTIME or None)
BUILD_TIMEOUT_S = 1800


def engine_env(**extra: str) -> dict[str, str]:
    return {**container_backend.engine_environment(os.environ, REPO_ROOT), **extra}


def podman(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*ENGINE.argv, *args],
        env=env or engine_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check:
        assert result.returncode == 0, f"podman {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def containers_labelled(label: str) -> list[str]:
    """Every container (running or not) with `label`, as names."""
    listed = podman("ps", "--all", "--filter", f"label={label}", "--format", "json").stdout
    return [entry["Names"][0] for entry in json.loads(listed or "[]")]


def remove_containers(label: str) -> None:
    for name in containers_labelled(label):
        podman("rm", "--force", name, check=False)


def run_script(*argv: str, env: dict[str, str]) -> str:
    """One of scripts/, its last stdout line (the image reference these scripts print)."""
    result = subprocess.run(
        [str(REPO_ROOT / "scripts" / argv[0]), *argv[1:]],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def base_image() -> str:
    """The stand-in for the NGC base image: built once, then taken from podman's storage."""
    return run_script("build-base-image.sh", env=engine_env(PYTHON=sys.executable))


@pytest.fixture(scope="session")
def trainer_image(base_image: str) -> Iterator[str]:
    """The training image, built from trainer/Dockerfile on that base, as `make image` does."""
    built = run_script("build-image.sh", TEST_IMAGE, env=engine_env(BASE_IMAGE=base_image))
    assert built == TEST_IMAGE
    yield TEST_IMAGE


def run_container(
    image: str,
    options: Sequence[str],
    command: Sequence[str],
    *,
    name: str,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """`podman run --rm OPTIONS IMAGE COMMAND` in the foreground; the container is gone after."""
    try:
        return podman(
            "run", "--rm", "--name", name, *options, image, *command, check=False, timeout=timeout
        )
    finally:
        podman("rm", "--force", name, check=False)
