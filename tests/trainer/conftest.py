"""Helpers for trainer tests: launch real torchrun jobs on CPU (gloo) and inspect their
checkpoint directories through the trainer's own inspection command."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from machine import procs
from machine.ports import free_port
from tests.conftest import REPO_ROOT
from tests.support import waiting
from trainer.checkpoint import (
    CheckpointEntry,
    CheckpointError,
    CheckpointStore,
    checkpoint_name,
    describe,
)
from trainer.checkpoint_schema import TrainingCheckpoint
from trainer.sharded import hash_files
from trainer.sharded_transfer import spooled, upload

PYTHON = sys.executable
TORCHRUN = (str(Path(sys.executable).with_name("torchrun")),)
# torchrun as the pod runs it (trainer/entrypoint.sh): the trainer's exit code, no traceback.
LAUNCH = (PYTHON, "-m", "trainer.launch")
TIMEOUT_S = 180

# One small run shared by many tests: 256 samples -> 4 steps per rank per epoch on 2 ranks.
# SAVE_EVERY does not divide TOTAL, so the schedule shows the extra final checkpoint.
TOTAL_EPOCHS = 250
SAVE_EVERY = 100
BASE_ARGS = ("--dataset-size", "256", "--keep", "5")


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def torchrun_command(
    args: Sequence[str],
    nproc: int = 2,
    launcher: Sequence[str] = TORCHRUN,
    *,
    node: tuple[int, int, int] | None = None,
) -> list[str]:
    """`node`: (node rank, node count, master port) for one of several torchruns that form one
    job, as each pod of a PyTorchJob runs its own; else a single-node job on a free port."""
    node_rank, nodes, port = node if node is not None else (0, 1, free_port())
    return [
        *launcher,
        "--nnodes",
        str(nodes),
        "--node-rank",
        str(node_rank),
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "-m",
        "trainer",
        *args,
    ]


# A run that checkpoints mid-epoch (every 4 of its 16 steps an epoch on 2 ranks), so a kill lands
# between or during saves: the resume-on-another-world-size tests and the object-storage ones.
MID_EPOCH_DATASET = 512
MID_EPOCH_PER_RANK = 16  # on 2 ranks: a global batch of 32
MID_EPOCH_EPOCHS = 3


def mid_epoch_args(root: str | Path) -> list[str]:
    return [
        str(MID_EPOCH_EPOCHS),
        "1",
        "--checkpoint-dir",
        str(root),
        "--dataset-size",
        str(MID_EPOCH_DATASET),
        "--batch_size",
        str(MID_EPOCH_PER_RANK),
        "--save-every-steps",
        "4",
        "--keep",
        "20",
    ]


def reference_args(directory: Path, total: int = TOTAL_EPOCHS) -> list[str]:
    return [str(total), str(SAVE_EVERY), "--checkpoint-dir", str(directory), *BASE_ARGS]


@dataclass
class Finished:
    returncode: int
    output: str


def run_trainer(
    args: Sequence[str],
    *,
    nproc: int = 2,
    env: dict[str, str] | None = None,
    launcher: Sequence[str] = TORCHRUN,
) -> Finished:
    done = subprocess.run(
        torchrun_command(args, nproc, launcher),
        cwd=REPO_ROOT,
        env=trainer_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return Finished(done.returncode, done.stdout)


class Background:
    """A torchrun job in its own session, so the test can signal it like a kubelet would; run
    by ``trainer.launch``, as in the pod, unless told otherwise."""

    def __init__(
        self,
        args: Sequence[str],
        log: Path,
        env: dict[str, str] | None = None,
        launcher: Sequence[str] = LAUNCH,
        *,
        nproc: int = 2,
        node: tuple[int, int, int] | None = None,
    ) -> None:
        self.log = log
        self._handle = log.open("w")
        self.process = subprocess.Popen(
            torchrun_command(args, nproc, launcher, node=node),
            cwd=REPO_ROOT,
            env=trainer_env(env),
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill_all(self) -> None:
        """SIGKILL torchrun and every worker at once, like a node or pod dying. (torchrun starts
        each worker in its own session, so killing torchrun's process group would not do.)"""
        pids = procs.descendants(self.process.pid)
        for pid in [self.process.pid, *pids]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def worker_of_rank(self, rank: int) -> int:
        """The pid of the trainer process torchrun started for ``rank`` (from its RANK env)."""
        workers = set(procs.descendants(self.process.pid))
        for pid in procs.tagged("RANK", str(rank)):
            if pid in workers:
                return pid
        raise AssertionError(f"no worker process with RANK={rank} under torchrun")

    def wait(self, timeout: float = TIMEOUT_S) -> Finished:
        workers = procs.descendants(self.process.pid)
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.kill_all()
                self.process.wait()
            self._handle.close()
        # No orphaned worker may keep writing to the directory while the test goes on.
        wait_until(lambda: not any(procs.is_alive(pid) for pid in workers), "the workers to exit")
        return Finished(code, self.log.read_text())


def wait_until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
    """The shared poll loop, at the pace of a training step (tests/support/waiting.py)."""
    waiting.wait_until(condition, what, timeout, interval=0.02)


def manifest_epochs(directory: Path) -> list[tuple[int, int]]:
    try:
        entries = CheckpointStore(directory).manifest()
    except CheckpointError:
        return []
    return [(entry.epochs_completed, entry.step_in_epoch) for entry in entries]


def fake_state(value: float, epochs: int) -> dict[str, Any]:
    """A small checkpoint dictionary as the trainer hands it to the writer and the store."""
    return TrainingCheckpoint(
        model_state={"weight": torch.full((4, 3), value)},
        epochs_run=epochs,
        world_size=2,
        config_fingerprint="abc",
    ).to_state()


def fake_sharded_commit(store: CheckpointStore, epochs: int, shards: int = 2) -> CheckpointEntry:
    """A committed sharded checkpoint with stand-in shard files (no DCP): what the ranks
    leave before rank 0 commits, then the commit. On a directory: their files in the
    temporary directory, hashed by each, and DCP's index, hashed by nobody; on other storage:
    every file uploaded under the checkpoint's name, the index by rank 0."""
    name = checkpoint_name(epochs, 0, sharded=True)
    target = store.prepare_sharded(name)
    ranks = [f"__{rank}_0.distcp" for rank in range(shards)]
    root = store.storage.local_directory()
    with spooled("test-shards") as written:
        for rank, file in enumerate(ranks):
            (written / file).write_bytes(bytes([epochs, rank]) * 100)
        (written / ".metadata").write_bytes(b"index")
        if root is not None:
            shutil.copytree(written, root / target)
            hashed = hash_files(root / target, ranks)
        else:
            hashed = upload(store.storage, target, written)
    state = TrainingCheckpoint({}, epochs, shards, "abc", format_version=3).to_state()
    return store.commit_sharded(target, state, hashed, epochs, 0)


def inspect(directory: Path) -> dict:
    """What a resume from ``directory`` would use (in-process; test_checkpoint covers the CLI)."""
    return describe(directory)


def run_module(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` as a user types it; the caller judges the exit code."""
    return subprocess.run(
        [PYTHON, "-m", module, *args],
        cwd=REPO_ROOT,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def inspect_cli(directory: Path) -> dict:
    done = run_module("trainer.checkpoint", str(directory))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run; every resume test must end with exactly these weights.

    Under pytest-xdist the workers share one run, in the session's common temporary directory:
    the first worker to need it trains it while the others wait on a lock, since a second
    2-rank run would only compete for the same cores. Tests only read it (or copy it)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _train_reference(tmp_path_factory.mktemp("reference") / "ckpt")
    shared = tmp_path_factory.getbasetemp().parent / "reference"
    shared.mkdir(exist_ok=True)
    directory, complete = shared / "ckpt", shared / "complete"
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not complete.exists():
            shutil.rmtree(directory, ignore_errors=True)  # what a failed worker left behind
            _train_reference(directory)
            complete.touch()
    return directory


def _train_reference(directory: Path) -> Path:
    finished = run_trainer(reference_args(directory))
    assert finished.returncode == 0, finished.output
    return directory


@pytest.fixture
def reference_copy(reference_run: Path, tmp_path: Path) -> Path:
    """A private copy for tests that damage or extend a finished run."""
    copy = tmp_path / "ckpt"
    shutil.copytree(reference_run, copy)
    return copy
