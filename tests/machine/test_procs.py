"""machine.procs: signalling a replica's session reaches each of its processes exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from machine import procs
from tests.support.waiting import wait_until

# Counts the SIGTERMs it receives into a file; SIGUSR1 makes it exit. With --leave-group it
# first moves into a process group of its own, as torchrun's workers do with their sessions.
COUNTER = """\
import os, signal, sys, time
path = sys.argv[1]
if "--leave-group" in sys.argv:
    os.setpgid(0, 0)
count = 0
def on_term(signum, frame):
    global count
    count += 1
    with open(path, "w") as handle:
        handle.write(str(count))
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0))
open(path, "w").write("0")
while True:
    time.sleep(0.05)
"""


def wait_for_text(path: Path, timeout: float = 30) -> str:
    wait_until(lambda: path.exists() and bool(path.read_text()), f"{path} to be written", timeout)
    return path.read_text()


@pytest.mark.slow
def test_a_session_is_signalled_once_per_process(tmp_path: Path) -> None:
    """torchrun raises on every SIGTERM, so a second one lands inside its handling of the first
    (nested tracebacks, exit 1 instead of 143): each process must get the signal once, the
    leader's process group and a member that left it alike."""
    leader_count, member_count = tmp_path / "leader", tmp_path / "member"
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', {COUNTER!r}, {str(member_count)!r}, "
            "'--leave-group'])\n"
            f"exec({COUNTER!r})",
            str(leader_count),
        ],
        start_new_session=True,
    )
    processes = []
    try:
        wait_for_text(leader_count)
        wait_for_text(member_count)
        processes = procs.session_members(leader.pid)
        assert len(processes) == 2, processes

        procs.signal_session(leader.pid, signal.SIGTERM)
        time.sleep(0.5)

        assert leader_count.read_text() == "1"
        assert member_count.read_text() == "1"
    finally:
        procs.signal_pids([leader.pid, *processes], signal.SIGKILL)
        leader.wait(timeout=30)


def test_stop_kills_what_ignores_its_signal_once_the_grace_is_over() -> None:
    ignoring = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print(flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert ignoring.stdout is not None and ignoring.stdout.readline()  # its handler is set
    procs.stop(ignoring, grace=0.5)
    assert ignoring.returncode == -signal.SIGKILL


def test_stop_of_a_session_reaches_its_children() -> None:
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    procs.stop(leader, grace=5, session=True)
    assert leader.returncode is not None
    wait_until(lambda: not procs.is_alive(child), "the session's child to exit", 10)
