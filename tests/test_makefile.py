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


def make(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=cwd,
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


@pytest.mark.parametrize("stack", ["local", "digits-local"])
def test_a_stack_of_the_one_machine_cluster_runs_on_it(stack: str) -> None:
    """A stack whose kubeContext is the cluster's, whatever its name: preview, up and destroy
    start the cluster when needed; status and checkpoint use it while it runs and never start
    it; config gets its Pulumi CLI only."""
    for target in ("preview", "up", "destroy"):
        assert "-m cluster run --registry-port 5000 -- scripts/pulumi-stack.sh" in dry_run(
            target, f"STACK={stack}"
        )
    # Each `make cluster` is a new cluster: up reads back what of the state's objects is gone.
    assert dry_run("up", f"STACK={stack}").endswith(f"scripts/pulumi-stack.sh up {stack} --refresh")
    assert "-m cluster run --no-start -- .venv/bin/python -m tools.status" in dry_run(
        "status", f"STACK={stack}"
    )
    assert "-m cluster run --no-start -- .venv/bin/python -m tools.retrieve" in dry_run(
        "checkpoint", f"STACK={stack}", "OUT=/tmp/out"
    )
    assert dry_run("config", f"STACK={stack}", "CONFIG_ARGS=get x").endswith(
        f"-m cluster run --tools-only -- scripts/pulumi-stack.sh config {stack} get x"
    )
    assert "-m cluster" not in dry_run("local", f"STACK={stack}")


@pytest.mark.parametrize("stack", ["dev", "digits"])
def test_another_stack_runs_as_it_is(stack: str) -> None:
    for target in ("preview", "up", "destroy", "status", "checkpoint", "config"):
        assert "-m cluster" not in dry_run(target, f"STACK={stack}")
    assert "--refresh" not in dry_run("up", f"STACK={stack}")
    assert dry_run("config", f"STACK={stack}", "CONFIG_ARGS=set --path k v").endswith(
        f"scripts/pulumi-stack.sh config {stack} set --path k v"
    )


def checkout_for_make(directory: Path) -> None:
    """What `make -n` of a stack target reads: the Makefile, its includes, the requirements its
    stamps hash and the module that says which stacks are the cluster's."""
    for name in ("Makefile", "requirements.txt", "requirements-dev.txt", "requirements-docs.txt"):
        shutil.copy2(REPO_ROOT / name, directory / name)
    (directory / "policy").mkdir()
    shutil.copy2(REPO_ROOT / "policy" / "requirements.txt", directory / "policy")
    for name in ("tools/containers", "cluster/__init__.py", "cluster/stacks.py"):
        source, target = REPO_ROOT / name, directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)


def test_a_stack_naming_the_clusters_registry_on_another_context_is_told_so_once(
    tmp_path: Path,
) -> None:
    checkout_for_make(tmp_path)
    local = (REPO_ROOT / "Pulumi.local.yaml").read_text()
    (tmp_path / "Pulumi.mymodel.yaml").write_text(
        local.replace("kubeContext: pytorch-distributed-local", "kubeContext: kind-kind")
    )
    done = make("-n", "up", "STACK=mymodel", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: stack mymodel names the one-machine cluster's registry 127.0.0.1:5000 but runs on "
        "kubeContext kind-kind, not the cluster: `make` gives it your own kubeconfig, Docker "
        "engine and Pulumi CLI; for the cluster set kubeContext: pytorch-distributed-local (as "
        "Pulumi.local.yaml does)"
    ]
    assert "-m cluster" not in done.stdout


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
