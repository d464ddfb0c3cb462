"""Containers for the image and real-engine suites: podman with this project's configuration, the
images `make image` builds, a loopback registry and podman's Docker-compatible API.

One home for what both suites start: the image suite pushes with podman and through the Docker
API by hand, the real-engine suite has `pulumi up` build and push through the same API with the
Docker provider. Nothing here edits the machine's global container configuration.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster import docker_api as cluster_docker_api
from machine.containers import DEFAULT_RUNTIME, engine_environment
from machine.ports import free_port
from tests.conftest import REPO_ROOT
from tools.local_backends import container as container_backend

TEST_IMAGE = "localhost/pytorch-distributed-trainer:test"
# What scripts/container-env.sh defaults to, and the Makefile passes on.
RUNTIME = os.environ.get("CONTAINER_RUNTIME", DEFAULT_RUNTIME)
ENGINE = container_backend.Engine("podman", RUNTIME or None)
BUILD_TIMEOUT_S = 1800
REGISTRY_SCRIPT = REPO_ROOT / "cluster" / "local-registry.sh"
# The media types a registry may serve an image manifest as; a node's pull accepts them all.
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


# Every podman build on this machine shares one store. A test that measures what a build leaves
# in it (tests/e2e/test_image_build.py) holds it alone; the image suite's builds share it, and
# .ci/run runs `make image-test` beside `make e2e`.
STORE_LOCK = Path(os.environ.get("TMPDIR") or "/var/tmp") / "pytorch-distributed-podman-store.lock"


@contextlib.contextmanager
def podman_store(*, alone: bool) -> Iterator[None]:
    """Hold the store's lock: alone (no other holder's builds) or shared with other builders."""
    with STORE_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        yield


def engine_env(**extra: str) -> dict[str, str]:
    return {**engine_environment(os.environ, REPO_ROOT), **extra}


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


def build_base_image() -> str:
    """The stand-in for the NGC base image: built once (cached in podman's storage), then found."""
    return run_script("build-base-image.sh", env=engine_env(PYTHON=sys.executable))


@dataclass(frozen=True)
class Registry:
    """A registry started by cluster/local-registry.sh, with its own registries.conf for
    podman (the project's, plus this address as plain HTTP)."""

    address: str
    registries_conf: Path
    username: str | None = None
    password: str | None = None

    def request(
        self, path: str, *, method: str = "GET", credentials: tuple[str, str] | None = None
    ) -> tuple[int, dict[str, str]]:
        """Status and headers of one registry API call (`/v2/...`), as a node's pull makes it."""
        request = urllib.request.Request(
            f"http://{self.address}{path}", headers={"Accept": MANIFEST_TYPES}, method=method
        )
        if credentials is not None:
            token = base64.b64encode(":".join(credentials).encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers)

    def manifest_digest(self, repository: str, reference: str) -> str:
        """The digest the registry itself computes for the manifest it serves."""
        credentials = None if self.username is None else (self.username, self.password or "")
        status, headers = self.request(
            f"/v2/{repository}/manifests/{reference}", credentials=credentials
        )
        assert status == 200, f"{repository}:{reference}: {status}"
        return headers["Docker-Content-Digest"]


@contextlib.contextmanager
def local_registry(
    directory: Path, *, username: str | None = None, password: str | None = None
) -> Iterator[Registry]:
    """cluster/local-registry.sh on a free port, stopped on exit; with `username`, it requires
    authentication with `password`."""
    port = free_port()
    args = [str(REGISTRY_SCRIPT), "start", str(directory / "registry"), str(port)]
    env = dict(os.environ)
    if username is not None:
        args += ["--user", username]
        env["LOCAL_REGISTRY_PASSWORD"] = password or ""
    started = subprocess.run(
        args, capture_output=True, text=True, timeout=600, check=False, env=env
    )
    assert started.returncode == 0, started.stdout + started.stderr
    address = started.stdout.strip()
    assert address == f"127.0.0.1:{port}"
    conf = cluster_docker_api.registries_conf(directory / "registries.conf", address)
    try:
        yield Registry(address, conf, username, password)
    finally:
        remove_images_for(address)
        subprocess.run(
            [str(REGISTRY_SCRIPT), "stop", str(directory / "registry")], check=False, timeout=60
        )
        # A pushed base image is 5 GB: pytest keeps its last temporary directories, not this.
        shutil.rmtree(directory / "registry" / "storage", ignore_errors=True)


def remove_images_for(address: str) -> None:
    """Untag this machine's images named for the registry at `address` (a loopback port no
    later run reuses): the Docker provider keeps each image it built and pushed, and a
    developer's store filled up run after run (then the real node's kubelet refused pods for
    disk pressure). By name, not by ID: an ID's other names (the base image) stay, and an image
    is deleted with its last name."""
    listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", check=False)
    names = sorted({name for name in listed.stdout.split() if name.startswith(f"{address}/")})
    if names:
        podman("rmi", *names, check=False)


def stop_registry(directory: Path, address: str) -> None:
    """Stop the registry `local_registry` started in `directory`; return once its port is closed."""
    subprocess.run([str(REGISTRY_SCRIPT), "stop", str(directory)], check=True, timeout=60)
    host, port = address.split(":")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex((host, int(port))) != 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"the registry at {address} still answers")


def start_registry(directory: Path, address: str, username: str, password: str) -> None:
    """The same registry again: same port, same storage, same user."""
    started = subprocess.run(
        [str(REGISTRY_SCRIPT), "start", str(directory), address.split(":")[1], "--user", username],
        env={**os.environ, "LOCAL_REGISTRY_PASSWORD": password},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stdout + started.stderr


@contextlib.contextmanager
def docker_api(sock: Path, registries_conf: Path) -> Iterator[Path]:
    """`podman system service` on a unix socket (cluster/docker_api.py): the Docker Engine
    API that Docker clients (and the stack's Docker provider, through DOCKER_HOST) talk to."""
    with cluster_docker_api.docker_api(sock, registries_conf) as served:
        yield served


def containers_labelled(label: str) -> list[str]:
    """Every container (running or not) with `label`, as names."""
    listed = podman("ps", "--all", "--filter", f"label={label}", "--format", "json").stdout
    return [entry["Names"][0] for entry in json.loads(listed or "[]")]


def remove_containers(label: str) -> None:
    for name in containers_labelled(label):
        podman("rm", "--force", name, check=False)


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
