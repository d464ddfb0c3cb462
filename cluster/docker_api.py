"""podman's Docker-compatible API (`podman system service`) on a unix socket: the Docker Engine
API that the stack's Docker provider builds and pushes through (DOCKER_HOST), for a machine
without Docker Engine. The one-machine cluster (cluster/service.py) serves it at
`.cluster/podman.sock`; the image and e2e suites start their own (tests/containers.py).

podman runs with this project's configuration (tools/containers/*.conf, the OCI runtime of
tools/containers/defaults.env) and a registries.conf that marks the registry the stack pushes to
as plain HTTP. `--time 0` keeps the service up however long it idles.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from machine import procs
from machine.containers import DEFAULT_RUNTIME, DEFAULTS, engine_environment
from machine.engine_api import engine_answers
from settings.stack import REPO_ROOT

START_TIMEOUT_S = 60.0


def podman() -> list[str]:
    """podman with the project's OCI runtime (CONTAINER_RUNTIME, else defaults.env's)."""
    runtime = os.environ.get("CONTAINER_RUNTIME", DEFAULT_RUNTIME)
    return ["podman", "--runtime", runtime] if runtime else ["podman"]


def argv(sock: Path) -> list[str]:
    """The service's command line."""
    return [*podman(), "system", "service", "--time", "0", f"unix://{sock}"]


def environment(registries_conf: Path | None = None) -> dict[str, str]:
    """podman's environment: the project's containers.conf and registries.conf (or the given
    registries.conf)."""
    env = engine_environment(os.environ, REPO_ROOT)
    if registries_conf is not None:
        env["CONTAINERS_REGISTRIES_CONF"] = str(registries_conf)
    return env


def registries_conf(path: Path, *insecure: str) -> Path:
    """The project's registries.conf plus `insecure` (host:port, plain HTTP), written to `path`."""
    project_conf = REPO_ROOT / DEFAULTS["CONTAINERS_REGISTRIES_CONF_FILE"]
    extra = "".join(
        f'\n[[registry]]\nlocation = "{address}"\ninsecure = true\n' for address in insecure
    )
    path.write_text(project_conf.read_text() + extra)
    return path


def answers(sock: Path) -> bool:
    """The API answers `GET /_ping` on the socket."""
    return engine_answers(f"unix://{sock}")


@contextlib.contextmanager
def docker_api(sock: Path, registries: Path) -> Iterator[Path]:
    """The service in the foreground of a test: started, waited for, stopped on exit."""
    service = subprocess.Popen(
        argv(sock),
        env=environment(registries),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not sock.exists():
            if service.poll() is not None:
                raise RuntimeError(
                    "podman system service exited: "
                    + (service.stderr.read() if service.stderr else "")
                )
            if time.monotonic() > deadline:
                raise RuntimeError("podman system service did not listen")
            time.sleep(0.1)
        yield sock
    finally:
        procs.stop(service, grace=30)
