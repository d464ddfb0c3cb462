"""tools.run_local: the dev stack's PyTorchJob as local processes, from spec to resumed training."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from components.manifests import pytorchjob_manifest
from components.settings import SettingsError, load_stack_file
from tests.conftest import committed_epochs, wait_for_runner
from tools import procs
from tools.run_local import LocalRunError, apply_overrides, choose_devices, replica_commands

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB = "ddp-dev"  # job.name of the dev stack
MASTER = f"{JOB}-master-0"
WORKER = f"{JOB}-worker-0"
MARKER = "RUN_LOCAL_TEST_MARKER"
SMALL_RUN = ("--epochs", "4", "--save-every", "1", "--dataset-size", "256")
LONG_RUN = ("--epochs", "50", "--save-every", "1", "--dataset-size", "256")


# -- helpers ----------------------------------------------------------------------------------


def run_local_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tools.run_local", *args]


def runner_env(marker: str, **extra: str) -> dict[str, str]:
    """The runner's environment; every replica inherits MARKER, so survivors can be found."""
    return {**os.environ, "OMP_NUM_THREADS": "1", MARKER: marker, **extra}


def processes_with_marker(marker: str) -> list[int]:
    return [pid for pid in procs.tagged(MARKER, marker) if pid != os.getpid()]


def process_tree(root: int) -> list[int]:
    return [root, *procs.descendants(root)]


def inspect_checkpoint(checkpoint_dir: Path) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "trainer.checkpoint", str(checkpoint_dir)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def start_runner(marker: str, *args: str, **extra_env: str) -> subprocess.Popen[str]:
    """`python -m tools.run_local ARGS` in the background, output captured for `finish`."""
    return subprocess.Popen(
        run_local_command(*args),
        cwd=REPO_ROOT,
        env=runner_env(marker, **extra_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(runner: subprocess.Popen[str], marker: str) -> str:
    try:
        out, _ = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert processes_with_marker(marker) == [], "processes outlived the run"
    return out


@dataclass
class RunningJob:
    """A dev-stack run started by `running_past_a_checkpoint`; `out` is set once it is over."""

    runner: subprocess.Popen[str]
    checkpoint_dir: Path
    out: str = ""


@contextlib.contextmanager
def running_past_a_checkpoint(tmp_path: Path, run: tuple[str, ...]) -> Iterator[RunningJob]:
    """The dev stack's job running under `tools.run_local` with its first checkpoint committed;
    on exit the run is finished (and checked to leave no process behind). The trainer's
    write-delay hook keeps a tiny run from finishing before the test acts on it."""
    marker = uuid.uuid4().hex
    job = RunningJob(
        start_runner(
            marker,
            *("--stack", "dev", "--checkpoint-root", str(tmp_path), *run),
            TRAINER_CHECKPOINT_WRITE_DELAY="1",
        ),
        tmp_path / JOB,
    )
    try:
        wait_for_runner(
            lambda: committed_epochs(job.checkpoint_dir) >= 1,
            "a checkpoint exists",
            job.runner,
            timeout=180,
        )
        yield job
    finally:
        job.out = finish(job.runner, marker)


def overrides(**values: int | None) -> argparse.Namespace:
    return argparse.Namespace(
        epochs=values.get("epochs"),
        save_every=values.get("save_every"),
        dataset_size=values.get("dataset_size"),
    )


# -- the job spec as local processes ----------------------------------------------------------


def test_each_replica_gets_the_operator_env_with_a_local_rendezvous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "7")  # the host's own launcher variables must not leak in
    monkeypatch.setenv("PET_NNODES", "9")
    settings = load_stack_file("dev", REPO_ROOT)
    job = pytorchjob_manifest(settings, image="local")

    commands, notices = replica_commands(
        job,
        namespace="default",
        checkpoint_root=tmp_path,
        repo_root=REPO_ROOT,
        master_port=4321,
        visible_devices=["", ""],
    )

    assert notices == []
    assert [command.name for command in commands] == [MASTER, WORKER]
    # The operator's values (see test_operator_env) except the documented local rendezvous.
    for rank, command in enumerate(commands):
        expected = {
            "PYTHONUNBUFFERED": "1",  # training-operator v1.9 sets "1" (v1.8 and older "0")
            "MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "4321",
            "PET_MASTER_PORT": "4321",
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "PET_NODE_RANK": str(rank),
            "PET_NPROC_PER_NODE": "1",
            "PET_NNODES": "2",
            "OMP_NUM_THREADS": "1",  # the container's own env (cpu "1" / 1 process)
            "HOSTNAME": command.name,
            "CUDA_VISIBLE_DEVICES": "",
        }
        assert {key: command.env.get(key) for key in expected} == expected
        assert command.env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
        assert command.restart_policy == "OnFailure"


def test_an_elastic_job_is_refused_naming_the_reason(tmp_path: Path) -> None:
    job = pytorchjob_manifest(load_stack_file("dev", REPO_ROOT), image="local")
    job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}

    with pytest.raises(LocalRunError, match=r"spec\.elasticPolicy: the local runner emulates"):
        replica_commands(
            job,
            namespace="default",
            checkpoint_root=tmp_path,
            repo_root=REPO_ROOT,
            master_port=4321,
            visible_devices=["", ""],
        )


def test_container_paths_map_to_the_checkout_and_the_local_claim(tmp_path: Path) -> None:
    settings = apply_overrides(
        load_stack_file("dev", REPO_ROOT), overrides(epochs=4, save_every=1, dataset_size=256)
    )
    job = pytorchjob_manifest(settings, image="local")

    commands, _ = replica_commands(
        job,
        namespace="default",
        checkpoint_root=tmp_path,
        repo_root=REPO_ROOT,
        master_port=4321,
        visible_devices=["", ""],
    )

    argv = list(commands[1].argv)
    assert argv[0] == str(REPO_ROOT / "trainer" / "entrypoint.sh")
    assert argv[1:] == [
        "--max-restarts",
        "0",
        "--",
        "--batch_size",
        "32",
        "4",
        "1",
        "--checkpoint-dir",
        str(tmp_path / JOB),
        "--dataset-size",
        "256",
    ]
    assert commands[1].cwd == REPO_ROOT


def test_without_enough_gpus_the_job_runs_on_the_cpu_with_a_notice() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs the prod stack asks for")
    settings = load_stack_file("prod", REPO_ROOT)  # 2 nodes x 1 GPU

    local, devices, notice = choose_devices(settings)

    assert local.job.gpus_per_node == 0
    assert devices == ["", ""]
    assert notice is not None and "running on the CPU" in notice
    assert pytorchjob_manifest(local, image="local")["spec"]["nprocPerNode"] == "1"


# -- bad input fails before anything is created -----------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--epochs", "0"], "--epochs = '0': expected a positive integer"),
        (["--dataset-size", "many"], "--dataset-size = 'many': expected a positive integer"),
        (["--epochs", "2", "--save-every", "3"], "save every 3 epochs"),
    ],
)
def test_bad_flags_are_rejected_before_anything_runs(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    root = tmp_path / "claim"
    result = subprocess.run(
        run_local_command("--stack", "dev", "--checkpoint-root", str(root), *flags),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 2
    assert message in result.stderr
    assert not root.exists()


def test_bad_stack_value_gives_the_programs_settings_error(tmp_path: Path) -> None:
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    (tmp_path / "Pulumi.broken.yaml").write_text(dev.replace("nodes: 2", "nodes: 0"))
    with pytest.raises(SettingsError) as expected:
        load_stack_file("broken", tmp_path)
    root = tmp_path / "claim"

    result = subprocess.run(
        run_local_command(
            "--stack", "broken", "--stack-dir", str(tmp_path), "--checkpoint-root", str(root)
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {expected.value}"
    assert "job.nodes" in result.stderr
    assert not root.exists()


# -- end to end: real multi-process training --------------------------------------------------


@pytest.mark.slow
def test_killed_worker_is_restarted_and_training_resumes_from_the_claim(tmp_path: Path) -> None:
    with running_past_a_checkpoint(tmp_path, SMALL_RUN) as job:
        pid_file = tmp_path / ".run_local" / f"{WORKER}.pid"
        tree = process_tree(int(pid_file.read_text()))
        epochs_at_kill = committed_epochs(job.checkpoint_dir)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    runner, out, checkpoint_dir = job.runner, job.out, job.checkpoint_dir

    assert epochs_at_kill < 4, f"training finished before the kill; nothing was tested\n{out}"
    assert len(tree) >= 2, f"expected torchrun (exec'd by entrypoint.sh) and a trainer: {tree}"
    assert runner.returncode == 0, out
    assert f"[run_local] {WORKER} exited with code 137; restarting it" in out
    assert out.count(f"[{WORKER}] entrypoint.sh: torchrun") >= 2  # it really ran again
    resumed = [line for line in out.splitlines() if "resuming from" in line]
    assert resumed, f"no replica resumed from a checkpoint\n{out}"
    assert str(checkpoint_dir) in resumed[0]
    assert inspect_checkpoint(checkpoint_dir)["epochs_completed"] == 4
    assert "epochs completed: 4 of 4" in out


@pytest.mark.slow
def test_ctrl_c_stops_the_job_and_leaves_no_process_behind(tmp_path: Path) -> None:
    with running_past_a_checkpoint(tmp_path, LONG_RUN) as job:
        job.runner.send_signal(signal.SIGINT)
    runner, out, checkpoint_dir = job.runner, job.out, job.checkpoint_dir

    assert runner.returncode == 128 + signal.SIGINT, out
    assert "[run_local] SIGINT received: stopping every replica" in out
    assert f"[{MASTER}]" in out and "received SIGTERM" in out  # forwarded to the trainer
    assert f"job {JOB}: Interrupted" in out
    assert 1 <= inspect_checkpoint(checkpoint_dir)["epochs_completed"] < 50


@pytest.mark.slow
def test_master_failing_past_the_backoff_limit_fails_the_run(tmp_path: Path) -> None:
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    broken = dev.replace("nodes: 2", "nodes: 1").replace("backoffLimit: 3", "backoffLimit: 1")
    # A task that passes settings validation but cannot be imported: the trainer exits non-zero.
    broken = broken.replace("    backoffLimit: 1", "    backoffLimit: 1\n    task: nowhere:task")
    (tmp_path / "Pulumi.failing.yaml").write_text(broken)
    marker = uuid.uuid4().hex
    claim = ("--checkpoint-root", str(tmp_path / "claim"))

    runner = start_runner(marker, "--stack", "failing", "--stack-dir", str(tmp_path), *claim)
    out = finish(runner, marker)

    assert runner.returncode == 1, out
    assert f"job {JOB}: Failed ({MASTER} failed with exit code" in out
    assert "reached backoffLimit 1" in out
    assert out.count(f"[{MASTER}] entrypoint.sh: torchrun") == 1  # limit 1: no restart
