"""machine/containers.py: the container defaults read once from tools/containers/defaults.env,
and podman's environment with the project's configuration."""

from __future__ import annotations

from machine.containers import DEFAULTS, DEFAULTS_FILE, engine_environment
from tests.conftest import REPO_ROOT


def test_the_defaults_are_the_files_the_makefile_includes() -> None:
    assert DEFAULTS_FILE == REPO_ROOT / "tools" / "containers" / "defaults.env"
    assert "include tools/containers/defaults.env" in (REPO_ROOT / "Makefile").read_text()
    for name in ("CONTAINERS_CONF_FILE", "CONTAINERS_REGISTRIES_CONF_FILE"):
        assert (REPO_ROOT / DEFAULTS[name]).is_file()


def test_the_engine_gets_the_projects_configuration_unless_another_is_chosen() -> None:
    env = engine_environment({"PATH": "/bin"}, REPO_ROOT)
    assert env["CONTAINERS_CONF"] == str(REPO_ROOT / DEFAULTS["CONTAINERS_CONF_FILE"])
    chosen = engine_environment({"CONTAINERS_CONF": "/etc/mine.conf"}, REPO_ROOT)
    assert chosen["CONTAINERS_CONF"] == "/etc/mine.conf"
