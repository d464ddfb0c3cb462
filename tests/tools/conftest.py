"""Fixtures for the tools tests: run the supervisor on stand-in replicas, check for survivors."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from machine.procs import is_alive
from tests.conftest import REPO_ROOT

DATA = Path(__file__).resolve().parent / "data"


def overrides(**values: int | None) -> argparse.Namespace:
    """What `make local`'s --epochs, --save-every and --dataset-size set (tools/run_local.py)."""
    return argparse.Namespace(
        total_epochs=values.get("epochs"),
        save_every=values.get("save_every"),
        dataset_size=values.get("dataset_size"),
    )


def recorded_pids(pid_dir: Path) -> list[int]:
    """Every pid a stand-in replica (or its helper) recorded as `<name>.<...>.<pid>.pid`."""
    return [int(path.name.split(".")[-2]) for path in pid_dir.glob("*.*.*.pid")]


def replica_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Job:
    """A supervisor job over stand-in replicas, written to a JSON spec in tmp_path."""

    tmp_path: Path
    replicas: list[dict[str, Any]]
    policy: dict[str, Any]

    @property
    def pid_dir(self) -> Path:
        return self.tmp_path / "pids"

    @property
    def runner_pid_dir(self) -> Path:
        return self.tmp_path / "runner-pids"

    def add(self, name: str, *flags: str, restart_policy: str = "OnFailure") -> None:
        argv = [sys.executable, str(DATA / "replica.py"), "--name", name]
        argv += ["--pid-dir", str(self.pid_dir), *flags]
        self.replicas.append(
            {
                "name": name,
                "argv": argv,
                "env": replica_env(),
                "cwd": str(self.tmp_path),
                "restart_policy": restart_policy,
            }
        )

    def spec_file(self) -> Path:
        path = self.tmp_path / "job.json"
        spec = {
            "replicas": self.replicas,
            "policy": self.policy,
            "pid_dir": str(self.runner_pid_dir),
        }
        path.write_text(json.dumps(spec))
        return path

    def command(self) -> list[str]:
        return [sys.executable, str(DATA / "run_supervisor.py"), str(self.spec_file())]

    def start(self) -> subprocess.Popen[str]:
        """The runner in the background, its output (merged) on a pipe."""
        return subprocess.Popen(
            self.command(),
            env=replica_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(),
            env=replica_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def runs(self, name: str) -> int:
        state = self.pid_dir / f"{name}.runs"
        return int(state.read_text()) if state.exists() else 0


@pytest.fixture
def make_job(tmp_path: Path) -> Iterator[Callable[..., Job]]:
    def factory(**policy: Any) -> Job:
        policy.setdefault("success_replica", "job-master-0")
        policy.setdefault("restart_delay_seconds", 0.2)
        policy.setdefault("grace_seconds", 5)
        policy.setdefault("peer_exit_grace_seconds", 1)
        return Job(tmp_path=tmp_path, replicas=[], policy=policy)

    yield factory
    # A failed test must not leave its stand-ins running for the rest of the session.
    for pid in recorded_pids(tmp_path / "pids"):
        if is_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def outcome_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in result.stdout.splitlines() if line.startswith("OUTCOME ")]
    assert lines, f"no outcome printed\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return json.loads(lines[-1].removeprefix("OUTCOME "))
