"""The container engine's settings on this machine, shared by the local run's container backend
(tools/local_backends/container.py) and the one-machine cluster's Docker API
(cluster/docker_api.py).

The values live once in tools/containers/defaults.env (plain NAME=value lines, which the Makefile
includes and the scripts source as well): the trainer image's name, podman's OCI runtime and the
project's podman configuration files.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULTS_FILE = REPO_ROOT / "tools" / "containers" / "defaults.env"


def read_defaults(path: Path = DEFAULTS_FILE) -> dict[str, str]:
    """The NAME=value lines of tools/containers/defaults.env, which the Makefile and the scripts
    read as well: the image name, podman's runtime and configuration files live there once."""
    lines = path.read_text(encoding="utf-8").splitlines()
    pairs = (line.partition("=") for line in lines if line.strip() and not line.startswith("#"))
    return {name.strip(): value.strip() for name, _, value in pairs}


DEFAULTS = read_defaults()
DEFAULT_IMAGE = DEFAULTS["TRAINER_IMAGE"]
DEFAULT_RUNTIME = DEFAULTS["DEFAULT_CONTAINER_RUNTIME"]


def engine_environment(host_env: Mapping[str, str], repo_root: Path) -> dict[str, str]:
    """The engine's environment: the host's, with this project's podman configuration unless the
    caller chose another (CONTAINERS_CONF / CONTAINERS_REGISTRIES_CONF already set)."""
    env = dict(host_env)
    env.setdefault("CONTAINERS_CONF", str(repo_root / DEFAULTS["CONTAINERS_CONF_FILE"]))
    env.setdefault(
        "CONTAINERS_REGISTRIES_CONF", str(repo_root / DEFAULTS["CONTAINERS_REGISTRIES_CONF_FILE"])
    )
    return env
