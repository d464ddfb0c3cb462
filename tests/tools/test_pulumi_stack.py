"""scripts/pulumi-stack.sh (`make preview/up/destroy`): backend, passphrase and CLI handling.

The Pulumi CLI itself is not available here: the script's own decisions are tested, with a
stand-in `pulumi` on PATH that records how it was called.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "pulumi-stack.sh"
FAKE_PULUMI = """#!/usr/bin/env bash
# Stand-in for the Pulumi CLI: records each call; `whoami` fails (not logged in).
echo "$* | backend=${PULUMI_BACKEND_URL:-}" >> "$PULUMI_CALLS"
[[ $1 != whoami ]]
"""


def system_path() -> str:
    """A PATH with bash and coreutils but without any pulumi."""
    dirs = [str(Path(shutil.which(tool) or "/bin/x").parent) for tool in ("bash", "dirname")]
    return os.pathsep.join(dict.fromkeys([*dirs, "/usr/bin", "/bin"]))


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def fake_pulumi(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "pulumi"
    stub.write_text(FAKE_PULUMI)
    stub.chmod(0o755)
    calls = tmp_path / "calls.log"
    env = {
        "PATH": os.pathsep.join([str(bin_dir), system_path()]),
        "PULUMI_CALLS": str(calls),
        "HOME": str(tmp_path),
    }
    return env, calls


def test_missing_pulumi_cli_is_a_clear_error() -> None:
    assert all(not (Path(d) / "pulumi").exists() for d in system_path().split(os.pathsep))

    result = run(["up", "dev"], {"PATH": system_path()})

    assert result.returncode == 1
    assert "the Pulumi CLI is not installed" in result.stderr
    assert "make render STACK=dev" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["deploy", "dev"], "unknown action 'deploy'"),
        (["up"], "usage: scripts/pulumi-stack.sh <preview|up|destroy> <stack> [pulumi flags...]"),
        (["up", "nope"], "no stack file Pulumi.nope.yaml"),
    ],
)
def test_bad_arguments_are_rejected(args: list[str], message: str) -> None:
    result = run(args, {"PATH": system_path()})

    assert result.returncode == 1
    assert message in result.stderr


def test_file_backend_needs_a_passphrase(fake_pulumi: tuple[dict[str, str], Path]) -> None:
    env, calls = fake_pulumi

    result = run(["preview", "dev"], env)

    assert result.returncode == 1
    assert "export PULUMI_CONFIG_PASSPHRASE" in result.stderr
    assert calls.read_text().splitlines() == ["whoami | backend="]


def test_without_a_backend_the_local_file_backend_and_policy_pack_are_used(
    fake_pulumi: tuple[dict[str, str], Path],
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_CONFIG_PASSPHRASE"] = "local-test-passphrase"
    backend = f"file://{REPO_ROOT}/.pulumi-state"

    result = run(["preview", "dev"], env)

    assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines() == [
        "whoami | backend=",
        f"stack select --create dev | backend={backend}",
        "preview --stack dev --diff --policy-pack policy --policy-pack-config "
        f"policy/config/dev.json | backend={backend}",
    ]


def test_flags_after_the_stack_reach_the_cli(fake_pulumi: tuple[dict[str, str], Path]) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"

    result = run(["up", "prod", "--yes", "--event-log", "/tmp/events.jsonl"], env)

    assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines()[-1] == (
        "up --stack prod --diff --policy-pack policy --policy-pack-config policy/config/prod.json "
        "--yes --event-log /tmp/events.jsonl | backend=s3://team-bucket/pulumi"
    )


def test_a_configured_backend_is_left_alone(fake_pulumi: tuple[dict[str, str], Path]) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"

    result = run(["destroy", "prod"], env)

    assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines() == [
        "stack select --create prod | backend=s3://team-bucket/pulumi",
        "destroy --stack prod | backend=s3://team-bucket/pulumi",
    ]
