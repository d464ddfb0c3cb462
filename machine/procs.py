"""Process-tree bookkeeping: find, signal and reap what a replica started (psutil underneath).

A replica stands in for a pod, whose containers' processes all die with the pod. Locally no
single handle covers them: the replica runs in its own session, but torchrun starts each trainer
process in a new session of its own (`start_new_session=True` in torch.distributed.elastic), and
a killed parent's children are re-parented. What every descendant does keep is its environment,
so each replica carries a unique tag variable and `tagged` finds all its processes by it.

This is the one place that walks the process table: the supervisor, the local runner, the
one-machine cluster (its plane's processes, its sweep) and the tests that look for survivors all
ask here, so "alive" means the same thing to each of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Iterable
from typing import Any

import psutil

_PR_SET_CHILD_SUBREAPER = 36
# A zombie has exited and only waits to be reaped: nothing is left to signal or to wait for.
_EXITED = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() not in _EXITED
    except psutil.Error:  # gone, or not ours to inspect: either way nothing we can act on
        return False


def is_alive(pid: int) -> bool:
    """True for a process that still runs; a zombie has exited and only waits to be reaped."""
    try:
        return _running(psutil.Process(pid))
    except psutil.Error:
        return False


def session_members(session_id: int) -> list[int]:
    """Live processes whose session is `session_id` (psutil has no session id; getsid does)."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(OSError):
            if os.getsid(process.pid) == session_id and _running(process):
                members.append(process.pid)
    return members


def tagged(name: str, value: str) -> list[int]:
    """Live processes whose environment has `name=value` (inherited by every descendant that
    does not clear its environment). Processes we may not inspect are skipped."""
    found = []
    for process in psutil.process_iter(["environ"]):
        environ = process.info["environ"]  # None when access is denied or the process is gone
        if environ is not None and environ.get(name) == value and _running(process):
            found.append(process.pid)
    return found


def descendants(root: int) -> list[int]:
    """Live descendants of `root` (children, grandchildren, ...); none once `root` is gone."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    return [child.pid for child in children if _running(child)]


def signal_pids(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def signal_session(session_id: int, sig: signal.Signals) -> None:
    """Signal every process of a session once: the leader's process group, then the members
    that left that group. A process must not get a stop signal twice: torchrun's handler
    raises on each, and a second one lands inside its handling of the first."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session_id, sig)
    signal_pids(
        (pid for pid in session_members(session_id) if _process_group(pid) != session_id), sig
    )


def _process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # gone meanwhile
        return None


def become_subreaper() -> bool:
    """Adopt orphaned descendants, so none escapes to init while we run; False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_adopted(skip: Iterable[int]) -> None:
    """Collect exited orphans we adopted as subreaper, leaving `skip` (Popen's own children,
    whose exit status Popen itself must collect)."""
    skipped = set(skip)
    for child in psutil.Process().children():
        if child.pid in skipped or _running(child):
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child.pid, os.WNOHANG)


def stop(
    process: subprocess.Popen[Any],
    grace: float,
    sig: signal.Signals = signal.SIGTERM,
    *,
    session: bool = False,
) -> None:
    """Send `sig` to `process` (to the whole session it leads, with `session`), SIGKILL what
    outlives `grace` seconds, and reap it: a service that ignores its stop signal is still gone."""

    def send(which: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if session:
                os.killpg(process.pid, which)
            else:
                process.send_signal(which)

    send(sig)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait()
