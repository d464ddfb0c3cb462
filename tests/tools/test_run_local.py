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
import torch

from builders.job_apis.pytorchjob import pytorchjob_manifest
from machine import procs
from settings.stack import SettingsError, load_stack_file
from tests.conftest import REPO_ROOT, committed_epochs, wait_for_runner
from tests.tools.conftest import overrides
from tools.run_local import LocalRunError, apply_overrides
from tools.run_local import main as run_local_main
from trainer.checkpoint import CheckpointStore

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


def run_local_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        run_local_command(*args),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def files_under(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes: what a refused run must leave exactly as is."""
    if root.is_file():
        return {"": root.read_bytes()}
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def committed_run(
    directory: Path,
    *,
    dataset_size: int = 256,
    world_size: int = 2,
    global_batch: int | None = None,
) -> None:
    """`directory` as a dev-job run with these settings leaves it: one committed checkpoint,
    written by the trainer's own store and config, no training needed."""
    from trainer.checkpoint import CheckpointStore
    from trainer.checkpoint_schema import TrainingCheckpoint
    from trainer.cli import TrainConfig

    config = TrainConfig(
        total_epochs=4, save_every=1, checkpoint_dir=directory, dataset_size=dataset_size
    )
    directory.mkdir(parents=True)
    state = TrainingCheckpoint(
        model_state={"weight": torch.zeros(1, 20), "bias": torch.zeros(1)},
        epochs_run=2,
        world_size=world_size,
        config_fingerprint=config.fingerprint(),
        config=config.semantic_config(),
        global_batch=global_batch,
    ).to_state()
    CheckpointStore(directory, keep=2).commit(state, epochs=2, step=0)


def refused(capsys: pytest.CaptureFixture[str], *args: str, stack_dir: Path = REPO_ROOT) -> str:
    """`python -m tools.run_local` in this process: exit code 2 and one line of error, checked;
    returns that line."""
    code = run_local_main(["--stack-dir", str(stack_dir), *args])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert out == "", out  # nothing started
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# -- the CLI's refusals of a backend ---------------------------------------------------------


def test_an_elastic_job_in_containers_is_one_line_naming_the_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    (tmp_path / "Pulumi.elastic.yaml").write_text(
        dev.replace("    backoffLimit: 3", "    backoffLimit: 3\n    elastic:\n      minNodes: 1")
    )
    line = refused(
        capsys,
        *("--stack", "elastic", "--checkpoint-root", str(tmp_path / "claim")),
        *("--backend", "container"),
        stack_dir=tmp_path,
    )
    assert line == (
        "error: job.elastic: --backend container runs jobs of a fixed size only; run an elastic "
        "stack with --backend process (its agents re-form the group on loopback)"
    )


# -- bad input fails before anything is created -----------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--epochs", "0"], "--epochs = '0': expected a positive integer"),
        (["--dataset-size", "many"], "--dataset-size = 'many': expected a positive integer"),
    ],
)
def test_bad_flags_are_rejected_before_anything_runs(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    root = tmp_path / "claim"
    result = run_local_cli("--stack", "dev", "--checkpoint-root", str(root), *flags)

    assert result.returncode == 2
    assert message in result.stderr
    assert not root.exists()


def test_saving_less_often_than_the_epoch_count_is_allowed() -> None:
    """The trainer always saves the last epoch, so --save-every beyond --epochs means: only
    the final checkpoint."""
    settings = apply_overrides(load_stack_file("dev", REPO_ROOT), overrides(epochs=2, save_every=5))
    assert (settings.job.total_epochs, settings.job.save_every) == (2, 5)


def test_a_checkpoint_root_that_is_a_file_is_one_line_and_nothing_changes(
    tmp_path: Path,
) -> None:
    root = tmp_path / "claim"
    root.write_text("not a directory\n")

    result = run_local_cli("--stack", "dev", "--checkpoint-root", str(root))

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"error: --checkpoint-root = '{root}': exists and is not a directory; pass a directory "
        "this user can write (it is created if missing)"
    ]
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert root.read_text() == "not a directory\n"


def test_a_checkpoint_root_that_cannot_be_created_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    line = refused(capsys, "--stack", "dev", "--checkpoint-root", str(afile / "claim"))
    assert f"--checkpoint-root = '{afile / 'claim'}': cannot be created: {afile} is not a" in line
    assert sorted(tmp_path.iterdir()) == [afile]


def test_a_job_directory_that_is_a_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / JOB).write_text("x")
    line = refused(capsys, "--stack", "dev", "--checkpoint-root", str(tmp_path))
    assert f"--checkpoint-root = '{tmp_path}': the job's directory" in line
    assert f"'{tmp_path / JOB}' exists and is not a directory" in line
    assert files_under(tmp_path) == {JOB: b"x"}


def test_checkpoints_of_another_dataset_size_are_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    committed_run(tmp_path / JOB, dataset_size=256)
    before = files_under(tmp_path)

    line = refused(
        capsys,
        "--stack",
        "dev",
        "--checkpoint-root",
        str(tmp_path),
        *SMALL_RUN[:4],
        "--dataset-size",
        "512",
    )

    assert line.startswith(
        f"error: --dataset-size (job.datasetSize) = 512: the checkpoints in {tmp_path / JOB} "
        "were written with 256"
    ), line
    assert "use 256 to resume them" in line and "job.initFrom and a new job.name" in line
    assert files_under(tmp_path) == before  # nothing created, moved or lost
    # The stack's own value is named by its key alone (dev's datasetSize is 1024).
    line = refused(capsys, "--stack", "dev", "--checkpoint-root", str(tmp_path))
    assert line.startswith("error: job.datasetSize = 1024: the checkpoints in"), line


def test_checkpoints_of_another_world_size_pass_the_preflight(tmp_path: Path) -> None:
    """A checkpoint resumes on any world size with its own global batch (here 32 x 4)."""
    from tools.run_local import preflight

    committed_run(tmp_path / JOB, world_size=4)
    settings = apply_overrides(load_stack_file("dev", REPO_ROOT), overrides(dataset_size=256))
    job = pytorchjob_manifest(settings, image="local")
    args = argparse.Namespace(**vars(overrides(dataset_size=256)), backend="process")
    preflight(job, settings, args, checkpoint_root=tmp_path, repo_root=REPO_ROOT)


def test_more_processes_than_a_checkpoints_global_batch_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    committed_run(tmp_path / JOB, world_size=1, global_batch=1)
    before = files_under(tmp_path)
    line = refused(
        capsys, "--stack", "dev", "--checkpoint-root", str(tmp_path), "--dataset-size", "256"
    )
    assert line.startswith(
        f"error: job.nodes x job.gpusPerNode = 2 processes: the checkpoints in {tmp_path / JOB} "
        "belong to a run whose global batch of 1 samples per step at most 1 processes can share"
    ), line
    assert files_under(tmp_path) == before


def test_matching_checkpoints_pass_the_preflight(tmp_path: Path) -> None:
    from tools.run_local import preflight

    committed_run(tmp_path / JOB, dataset_size=256)
    settings = apply_overrides(load_stack_file("dev", REPO_ROOT), overrides(dataset_size=256))
    job = pytorchjob_manifest(settings, image="local")
    args = argparse.Namespace(**vars(overrides()), backend="process")
    preflight(job, settings, args, checkpoint_root=tmp_path, repo_root=REPO_ROOT)


def test_a_task_the_trainer_cannot_import_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    (tmp_path / "Pulumi.notask.yaml").write_text(
        dev.replace("    backoffLimit: 3", "    backoffLimit: 3\n    task: nowhere:build")
    )
    root = tmp_path / "claim"
    line = refused(capsys, "--stack", "notask", "--checkpoint-root", str(root), stack_dir=tmp_path)
    assert line.startswith("error: job.task: argument --task: cannot import module 'nowhere'")
    assert not root.exists()


def test_with_containers_a_task_only_the_image_has_is_left_to_the_container(
    tmp_path: Path,
) -> None:
    """The image may ship a task this checkout lacks; its name still decides the resume."""
    from tools.run_local import preflight

    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    (tmp_path / "Pulumi.imagetask.yaml").write_text(
        dev.replace("    backoffLimit: 3", "    backoffLimit: 3\n    task: inimage:build")
    )
    settings = load_stack_file("imagetask", tmp_path)
    job = pytorchjob_manifest(settings, image="localhost/trainer:test")
    root = tmp_path / "claim"
    containers = argparse.Namespace(**vars(overrides()), backend="container")
    preflight(job, settings, containers, checkpoint_root=root, repo_root=REPO_ROOT)
    with pytest.raises(LocalRunError, match=r"job\.task: argument --task: cannot import"):
        processes = argparse.Namespace(**vars(overrides()), backend="process")
        preflight(job, settings, processes, checkpoint_root=root, repo_root=REPO_ROOT)
    committed_run(root / JOB)  # checkpoints of the default task: a different run
    with pytest.raises(LocalRunError, match=r"job\.task = 'inimage:build': the checkpoints in"):
        preflight(job, settings, containers, checkpoint_root=root, repo_root=REPO_ROOT)


def test_an_unknown_stack_lists_the_existing_ones(capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, "--stack", "dve")
    assert line.endswith(
        f"the stacks in {REPO_ROOT} are dev, digits, digits-local, local, prod, trainjob"
    ), line


def test_keys_under_another_namespace_are_refused_naming_the_projects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    typo = dev.replace("pytorch-distributed:job:", "pytorch_distributed:job:")
    (tmp_path / "Pulumi.typo.yaml").write_text(typo)
    root = tmp_path / "claim"
    line = refused(capsys, "--stack", "typo", "--checkpoint-root", str(root), stack_dir=tmp_path)
    assert "config key 'pytorch_distributed:job'" in line
    assert "this project's keys are pytorch-distributed:<key>" in line
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
    # Each replica's torchrun got one SIGTERM, forwarded it once to its trainer, which stopped
    # with a checkpoint; both exit 143, the code of a stop a restart resumes.
    assert out.count("death signal, shutting down workers") == 2, out
    assert out.count("received SIGTERM: stopping after the current step") == 2, out
    assert f"[run_local] {MASTER} exited with code 143" in out
    assert f"[run_local] {WORKER} exited with code 143" in out
    assert "Traceback" not in out and "terminate called" not in out
    info = inspect_checkpoint(checkpoint_dir)
    assert 1 <= info["epochs_completed"] < 50
    epoch = info["epochs_completed"] + (1 if info["step_in_epoch"] else 0)
    assert (
        f"job {JOB}: stopped by Ctrl-C at epoch {epoch} (checkpoint saved); the same command "
        "resumes it"
    ) in out


@pytest.mark.slow
def test_master_failing_past_the_backoff_limit_fails_the_run(tmp_path: Path) -> None:
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    broken = dev.replace("nodes: 2", "nodes: 1").replace("backoffLimit: 3", "backoffLimit: 1")
    # A task that imports (the preflight accepts it) but fails building: the trainer exits 1.
    task = "    task: brokentask:build"
    broken = broken.replace("    backoffLimit: 1", f"    backoffLimit: 1\n{task}")
    (tmp_path / "Pulumi.failing.yaml").write_text(broken)
    (tmp_path / "brokentask.py").write_text(
        "def build(ctx):\n    raise ValueError('deliberately broken task')\n"
    )
    marker = uuid.uuid4().hex
    claim = ("--checkpoint-root", str(tmp_path / "claim"))

    runner = start_runner(
        marker, "--stack", "failing", "--stack-dir", str(tmp_path), *claim, PYTHONPATH=str(tmp_path)
    )
    out = finish(runner, marker)

    assert runner.returncode == 1, out
    assert f"job {JOB}: Failed ({MASTER} failed with exit code 1" in out
    assert "reached backoffLimit 1" in out
    assert out.count(f"[{MASTER}] entrypoint.sh: torchrun") == 1  # limit 1: no restart
    # The summary quotes the failing replica's last error line.
    assert (
        f"  last error:       [{MASTER}] error: trainer rank 0 failed with exit code 1: "
        "ValueError: deliberately broken task"
    ) in out


# -- your own code (issue 30) ------------------------------------------------------------------


def test_the_trainers_flags_are_refused_with_a_command_of_your_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, "--stack", "digits", "--checkpoint-root", str(tmp_path), "--epochs", "3")
    assert line == (
        "error: --epochs sets job.totalEpochs, which only the project's trainer reads; the stack "
        "runs job.command: give your script its own arguments there"
    )
    assert not (tmp_path / "digits").exists()


def test_a_volume_the_job_does_not_mount_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(
        capsys,
        *("--stack", "digits", "--checkpoint-root", str(tmp_path)),
        *("--volume", f"imagenet={tmp_path / 'imagenet'}"),
    )
    assert line == (
        "error: --volume imagenet=...: the job mounts no claim 'imagenet' (job.volumes: "
        "digits-data)"
    )


def test_a_volume_flag_without_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    result = run_local_cli("--stack", "digits", "--volume", "digits-data")
    assert result.returncode == 2
    assert "--volume = 'digits-data': expected CLAIM=DIR" in result.stderr


@pytest.mark.slow
def test_a_task_of_your_own_package_trains_with_the_trainer_from_its_directory(
    tmp_path: Path,
) -> None:
    """`job.task` from a package of your own (tests/tools/data/user_code, as an image built on
    the trainer's carries it): the preflight and the replicas import it from `image.context`."""
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    ref = "registry.example.com/ml/mine@sha256:" + "e" * 64
    own = dev.replace(
        "    build: true\n",
        f"    build: false\n    ref: {ref}\n    context: tests/tools/data/user_code\n",
    ).replace("    repository: localhost:5001/pytorch-distributed-trainer\n", "")
    own = own.replace("    backoffLimit: 3", "    backoffLimit: 0\n    task: mypkg.model:build")
    (tmp_path / "Pulumi.mine.yaml").write_text(own)
    marker = uuid.uuid4().hex
    runner = start_runner(
        marker,
        *("--stack", "mine", "--stack-dir", str(tmp_path)),
        *("--checkpoint-root", str(tmp_path / "claim"), *SMALL_RUN),
    )
    out = finish(runner, marker)

    assert runner.returncode == 0, out
    info = inspect_checkpoint(tmp_path / "claim" / JOB)
    assert info["epochs_completed"] == 4
    assert info["config"]["task"] == "mypkg.model:build"


# -- a run kept in object storage (--checkpoint-root s3://...) ------------------------------------


@pytest.mark.slow
def test_a_run_into_a_bucket_trains_there_and_a_second_run_resumes_from_it(
    s3_bucket: str, tmp_path: Path
) -> None:
    root = f"s3://{s3_bucket}/runs"
    args = ("--stack", "dev", "--checkpoint-root", root, "--dataset-size", "256")
    first = finish(
        start_runner("s3-first", *args, "--epochs", "2", "--save-every", "1"), "s3-first"
    )
    assert f"checkpoint committed: {root}/{JOB}/checkpoint-e000002" in first, first
    assert f"checkpoint:       {root}/{JOB}" in first and "epochs completed: 2 of 2" in first
    second = finish(
        start_runner("s3-again", *args, "--epochs", "3", "--save-every", "1"), "s3-again"
    )
    assert "(2 epochs completed)" in second and "epochs completed: 3 of 3" in second, second
    entries = CheckpointStore(f"{root}/{JOB}").manifest()
    assert [entry.epochs_completed for entry in entries] == [2, 3]  # --keep 2


def test_a_bucket_that_does_not_exist_is_one_line_before_anything_runs(
    s3_bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, "--stack", "dev", "--checkpoint-root", f"s3://{s3_bucket}-none/runs")
    assert f"is in bucket {s3_bucket}-none, which does not exist" in line, line


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        ("gs://ckpt/runs", "expected a directory or s3://BUCKET[/PREFIX]"),
        ("s3://Upper/runs", "the bucket: expected an S3 bucket name: 3-63 characters"),
        ("s3://ckpt/runs/../x", "the prefix: expected a key prefix such as runs/team-a"),
    ],
)
def test_an_object_storage_root_that_cannot_work_is_refused_naming_the_flag(
    root: str, expected: str
) -> None:
    result = run_local_cli("--stack", "dev", "--checkpoint-root", root)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--checkpoint-root = {root!r}" in result.stderr and expected in result.stderr
