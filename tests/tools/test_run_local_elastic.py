"""tools.run_local with an elastic stack (`job.elastic`, nodes 1:2): torchrun agents on a loopback
c10d rendezvous. The worker node is SIGKILLed mid-run and kept away (its hold file: no node for
its pod), the other node re-forms the group alone and trains on from the newest checkpoint;
once the node may come back it joins, and the job finishes every epoch. No checkpoint is lost
or goes backwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from machine import procs
from tests.conftest import REPO_ROOT
from tools.supervisor import HOLD_SUFFIX
from trainer.checkpoint import CheckpointError, CheckpointStore
from trainer.cli import EXIT_PEER_LOST
from trainer.metrics import read_metrics

JOB = "ddp-dev"
FIRST, SECOND = f"{JOB}-worker-0", f"{JOB}-worker-1"
MARKER = "RUN_LOCAL_ELASTIC_MARKER"
EPOCHS = 8
# 512 samples in global batches of 64 (32 per process x 2 pods): 8 steps per epoch, a
# checkpoint every 4. The write-delay hook makes each commit take 1 s, so an epoch lasts about
# 2 s: long enough for the kill to land mid-run, short enough for a test.
RUN = ("--epochs", str(EPOCHS), "--save-every", "1", "--dataset-size", "512")
TIMEOUT_S = 420


def elastic_stack(directory: Path) -> None:
    """The dev stack, elastic between 1 and its 2 pods, with step checkpoints."""
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    extra = "    elastic:\n      minNodes: 1\n    saveEverySteps: 4\n"
    (directory / "Pulumi.elastic.yaml").write_text(
        dev.replace("    backoffLimit: 3\n", "    backoffLimit: 3\n" + extra)
    )


class Observed:
    """The manifest as seen while the job runs: every newest entry, in the order seen."""

    def __init__(self, directory: Path) -> None:
        self.store = CheckpointStore(directory)
        self.newest: list[tuple[int, int, int]] = []  # (epochs, step, world size)

    def poll(self) -> list[tuple[int, int, int]]:
        try:
            entries = self.store.manifest()
        except CheckpointError:
            return self.newest  # caught mid-rename: look again next time
        if entries:
            last = entries[-1]
            seen = (last.epochs_completed, last.step_in_epoch, last.world_size)
            if not self.newest or self.newest[-1] != seen:
                self.newest.append(seen)
        return self.newest


def wait_while_running(runner: subprocess.Popen[str], observed: Observed, until, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not until(observed.poll()):
        if runner.poll() is not None:
            pytest.fail(f"the runner exited ({runner.returncode}) before {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_lost_node_shrinks_the_group_and_its_return_grows_it_exactly(tmp_path: Path) -> None:
    elastic_stack(tmp_path)
    root = tmp_path / "claim"
    directory = root / JOB
    hold = root / ".run_local" / f"{SECOND}{HOLD_SUFFIX}"
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        MARKER: marker,
        "TRAINER_CHECKPOINT_WRITE_DELAY": "1",
    }
    command = [sys.executable, "-m", "tools.run_local", "--stack-dir", str(tmp_path)]
    command += ["--stack", "elastic", "--checkpoint-root", str(root), *RUN]
    log = tmp_path / "runner.log"
    with log.open("w") as output:
        runner = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, text=True
        )
        observed = Observed(directory)
        try:
            wait_while_running(
                runner, observed, lambda seen: bool(seen) and seen[-1][2] == 2, "a checkpoint of 2"
            )
            before_kill = observed.newest[-1]
            # The node is lost: its pod's processes die at once and no node takes it back yet.
            hold.parent.mkdir(parents=True, exist_ok=True)
            hold.touch()
            session = int((root / ".run_local" / f"{SECOND}.pid").read_text())
            procs.signal_session(session, signal.SIGKILL)
            wait_while_running(
                runner,
                observed,
                lambda seen: seen[-1][2] == 1,
                "a checkpoint of the group re-formed without the lost node",
            )
            hold.unlink()  # a node for the pod again: it starts and joins
            wait_while_running(
                runner, observed, lambda seen: seen[-1][2] == 2, "a checkpoint of 2 nodes again"
            )
            code = runner.wait(timeout=TIMEOUT_S)
            observed.poll()
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
    out = log.read_text()
    assert code == 0, out
    assert [pid for pid in procs.tagged(MARKER, marker) if pid != os.getpid()] == []

    # The log shows each rendezvous: the failed group torchrun restarts, the SIGTERM it sends
    # the shrunk group when the node is back, and each group's world size.
    assert (
        "world size 2 on 2 node(s): each step trains the global batch of 64 samples, 32 per" in out
    )
    # The survivor's collective lost its peer: the exit code that restarts, not a failure of code.
    assert f"[{FIRST}] error: rank 0 lost a peer (" in out, out
    failed = rf"\[{FIRST}\] .*failed \(exitcode: {EXIT_PEER_LOST}\) local_rank: 0"
    assert re.search(failed, out), out
    shrunk = out.index(
        "world size 1 on 1 node(s) (the checkpoint was written with world size 2): each step "
        "trains the global batch of 64 samples, 64 per process, in up to 2 micro-batches of at "
        "most 32"
    )
    regroup = out.index(f"[{FIRST}] ", out.index("closing signal SIGTERM", shrunk))
    grown = out.index("world size 2 on 2 node(s) (the checkpoint was written with world size 1)")
    assert shrunk < regroup < grown, out
    assert f"{SECOND} stays pending while {hold} exists" in out
    assert f"restarting {SECOND}; it joins the next rendezvous" in out
    assert f"job {JOB}: Succeeded" in out and f"epochs completed: {EPOCHS} of {EPOCHS}" in out

    # No checkpoint lost: the shrunk group resumed from the newest one committed at the kill,
    # or a newer one (rank 0's write in flight, committed as its rank stopped).
    resumed = [
        (int(epochs), int(step))
        for epochs, step in re.findall(r"resuming from \S+checkpoint-e(\d+)-s(\d+)\.pt", out)
    ]
    assert len(resumed) >= 2, out
    assert resumed[0] >= before_kill[:2], (resumed, before_kill)
    # Never backwards: the newest committed checkpoint only moved forward.
    positions = [(epochs, step) for epochs, step, _ in observed.newest]
    assert positions == sorted(positions) and len(set(positions)) == len(positions), positions
    assert positions[-1] == (EPOCHS, 0)
    entries = CheckpointStore(directory).manifest()
    manifest = [(entry.epochs_completed, entry.step_in_epoch) for entry in entries]
    assert manifest == sorted(manifest)
    # Each epoch once in the history, every sample of it counted.
    rows = read_metrics(directory)
    assert [row["epoch"] for row in rows] == list(range(1, EPOCHS + 1))
    assert all(row["samples"] == 512 for row in rows)
