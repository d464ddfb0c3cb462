"""The Makefile as a newcomer meets it: `make help` lists every target; preview, up and destroy
say that the Pulumi CLI is missing before they build any virtual environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def phony_targets() -> set[str]:
    text = (REPO_ROOT / "Makefile").read_text()
    declared = re.search(r"^\.PHONY:(.*)$", text, re.MULTILINE)
    assert declared is not None
    return set(declared.group(1).split())


def test_make_help_lists_every_target() -> None:
    done = make("help")
    assert done.returncode == 0, done.stderr
    listed = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("  make ")}
    assert listed == phony_targets()
    assert {"e2e", "e2e-tools"} <= listed  # names with digits included


@pytest.mark.skipif(shutil.which("pulumi") is not None, reason="the Pulumi CLI is installed")
@pytest.mark.parametrize("target", ["preview", "up", "destroy"])
def test_a_missing_pulumi_cli_is_said_before_any_virtual_environment_is_built(
    tmp_path: Path, target: str
) -> None:
    venv = tmp_path / "venv"
    done = make(target, f"VENV={venv}", env={**os.environ, "PYTHON": "false"})
    assert done.returncode != 0
    assert "the Pulumi CLI is not installed" in done.stderr
    assert not venv.exists()
    assert "pip install" not in done.stdout + done.stderr


def help_variables() -> dict[str, str]:
    """NAME -> what it does, from `make help`'s list of variables."""
    done = make("help")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("Variables (make TARGET NAME=value):\n", 1)[1]
    return {line.split()[0]: line.split(None, 1)[1] for line in listed.splitlines()}


def test_make_help_lists_every_variable_a_command_line_may_set() -> None:
    text = (REPO_ROOT / "Makefile").read_text()
    settable = set(re.findall(r"^([A-Z][A-Z0-9_]*) \?=", text, re.MULTILINE))
    assert set(help_variables()) == settable
    assert {"STACK", "OUT", "PULUMI_ARGS", "EVENT_LOG"} <= settable


def test_the_makefile_reads_no_variable_it_does_not_declare() -> None:
    """A `$(NAME)` that is neither declared here, in tools/containers/defaults.env nor make's own
    would be read from the command line or environment without `make help` saying so."""
    text = (REPO_ROOT / "Makefile").read_text()
    declared = set(re.findall(r"^([A-Z][A-Z0-9_]*) *(?::=|\?=|=)", text, re.MULTILINE))
    defaults = (REPO_ROOT / "tools" / "containers" / "defaults.env").read_text()
    declared |= set(re.findall(r"^([A-Z][A-Z0-9_]*)=", defaults, re.MULTILINE))
    make_own = {"MAKEFILE_LIST", "MAKECMDGOALS", "SHELL", "MAKE"}
    read = set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text))
    assert read - declared - make_own == set()


def dry_run(*args: str) -> str:
    done = make("-n", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_local_stack_runs_on_the_one_machine_cluster() -> None:
    """STACK=local: preview, up and destroy start the cluster when needed; status and
    checkpoint use it while it runs and never start it. Other stacks run as they are."""
    for target in ("preview", "up", "destroy"):
        assert "-m tools.cluster run --registry-port 5000 -- scripts/pulumi-stack.sh" in dry_run(
            target, "STACK=local"
        )
        assert "tools.cluster" not in dry_run(target, "STACK=dev")
    # Each `make cluster` is a new cluster: up reads back what of the state's objects is gone.
    assert dry_run("up", "STACK=local").endswith("scripts/pulumi-stack.sh up local --refresh")
    assert "--refresh" not in dry_run("up", "STACK=dev")
    assert "-m tools.cluster run --no-start -- .venv/bin/python -m tools.status" in dry_run(
        "status", "STACK=local"
    )
    assert "-m tools.cluster run --no-start -- .venv/bin/python -m tools.retrieve" in dry_run(
        "checkpoint", "STACK=local", "OUT=/tmp/out"
    )


def test_event_log_reaches_the_wrapper_as_a_variable() -> None:
    assert dry_run("up", "STACK=dev", "EVENT_LOG=/tmp/events.jsonl").startswith(
        "EVENT_LOG=/tmp/events.jsonl "
    )


def test_the_e2e_projects_copy_has_every_requirement_file_the_venv_stamp_reads() -> None:
    """The suite's project runs `make` as a user's checkout does: a requirement file the stamp
    reads but the copy lacks stops every target with make's 'No rule to make target'."""
    from tests.e2e.conftest import PROJECT_FILES

    declared = re.search(r"^REQUIREMENTS := (.*)$", (REPO_ROOT / "Makefile").read_text(), re.M)
    assert declared is not None
    for name in declared.group(1).split():
        top = name.split("/")[0]
        assert top in PROJECT_FILES or top == "policy", name
