"""tools.run_local --backend container: the dev stack's 2-replica PyTorchJob, each replica a
container of the training image, under the same supervision as the process backend."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, committed_epochs, wait_for_runner
from tests.containers import (
    RUNTIME,
    containers_labelled,
    engine_env,
    podman,
    remove_containers,
)
from tools.local_backends.container import LABEL_PREFIX
from tools.run_local import PID_DIR_NAME

# The first test also builds the images (a cold base image takes about 9 minutes on 2 cores).
pytestmark = [pytest.mark.container, pytest.mark.timeout(1800)]

JOB = "ddp-dev"
MASTER = f"{JOB}-master-0"
WORKER = f"{JOB}-worker-0"
SMALL_RUN = ("--epochs", "4", "--save-every", "1", "--dataset-size", "256")
LONG_RUN = ("--epochs", "50", "--save-every", "1", "--dataset-size", "256")
# The trainer's write-delay hook keeps these tiny runs from finishing before the test acts.
SLOW_WRITES = ("--container-env", "TRAINER_CHECKPOINT_WRITE_DELAY=1")


class ContainerRun:
    """`python -m tools.run_local --backend container` in the background, and its containers."""

    def __init__(self, image: str, checkpoint_root: Path, *args: str) -> None:
        self.checkpoint_root = checkpoint_root
        runtime = ("--container-runtime", RUNTIME) if RUNTIME else ()
        command = [sys.executable, "-m", "tools.run_local", "--stack", "dev"]
        command += ["--backend", "container", "--image", image, *runtime]
        command += ["--checkpoint-root", str(checkpoint_root), *args]
        self.runner = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=engine_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def container_name(self, pod: str) -> str:
        path = self.checkpoint_root / PID_DIR_NAME / f"{pod}.container"
        wait_for_runner(path.exists, f"{path} exists", self.runner)
        return path.read_text().strip()

    @property
    def run_label(self) -> str:
        run = self.container_name(MASTER).removeprefix(f"{MASTER}-")
        return f"{LABEL_PREFIX}.run={run}"

    def finish(self) -> str:
        try:
            out, _ = self.runner.communicate(timeout=600)
        finally:
            if self.runner.poll() is None:
                self.runner.kill()
                self.runner.wait()
        return out


@pytest.fixture
def container_run(trainer_image: str, tmp_path: Path) -> Iterator[Callable[..., ContainerRun]]:
    started: list[ContainerRun] = []

    def start(*args: str) -> ContainerRun:
        run = ContainerRun(trainer_image, tmp_path, *args)
        started.append(run)
        return run

    yield start
    for run in started:  # a failed test must not leave its containers behind
        if run.runner.poll() is None:
            run.runner.kill()
            run.runner.wait()
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            remove_containers(run.run_label)


def test_killed_worker_container_is_restarted_and_resumes_from_the_mount(
    container_run: Callable[..., ContainerRun], tmp_path: Path
) -> None:
    checkpoint_dir = tmp_path / JOB
    run = container_run(*SMALL_RUN, *SLOW_WRITES)
    label = run.run_label
    wait_for_runner(
        lambda: committed_epochs(checkpoint_dir) >= 1, "a checkpoint exists", run.runner
    )
    epochs_at_kill = committed_epochs(checkpoint_dir)
    podman("kill", "--signal", "KILL", run.container_name(WORKER))
    out = run.finish()

    assert epochs_at_kill < 4, f"training finished before the kill; nothing was tested\n{out}"
    assert run.runner.returncode == 0, out
    assert f"[run_local] {WORKER} exited with code 137; restarting it" in out
    assert out.count(f"[{WORKER}] entrypoint.sh: torchrun") >= 2, out  # it really ran again
    assert f"master={MASTER}:" in out  # the master is reached by its pod name
    resumed = [line for line in out.splitlines() if "resuming from" in line]
    assert resumed and f"/checkpoints/{JOB}/" in resumed[0], out  # the mount, seen inside
    assert "epochs completed: 4 of 4" in out
    assert containers_labelled(label) == [], "containers outlived the run"


def test_ctrl_c_is_forwarded_into_the_containers_and_none_is_left(
    container_run: Callable[..., ContainerRun], tmp_path: Path
) -> None:
    checkpoint_dir = tmp_path / JOB
    run = container_run(*LONG_RUN, *SLOW_WRITES)
    label = run.run_label
    wait_for_runner(
        lambda: committed_epochs(checkpoint_dir) >= 1, "a checkpoint exists", run.runner
    )
    run.runner.send_signal(signal.SIGINT)
    out = run.finish()

    assert run.runner.returncode == 128 + signal.SIGINT, out
    assert "[run_local] SIGINT received: stopping every replica" in out
    assert f"[{MASTER}]" in out and "received SIGTERM" in out  # reached the containers' trainers
    assert f"job {JOB}: stopped by Ctrl-C at epoch" in out
    assert 1 <= committed_epochs(checkpoint_dir) < 50
    assert containers_labelled(label) == [], "containers outlived the run"
