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
