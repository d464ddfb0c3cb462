"""Process-tree bookkeeping on Linux through /proc: find, signal and reap what a replica started.

A replica stands in for a pod, whose containers' processes all die with the pod. Locally no
single handle covers them: the replica runs in its own session, but torchrun starts each trainer
process in a new session of its own (`start_new_session=True` in torch.distributed.elastic), and
a killed parent's children are re-parented. What every descendant does keep is its environment,
so each replica carries a unique tag variable and `tagged` finds all its processes by it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterable
from pathlib import Path

_PROC = Path("/proc")
_PR_SET_CHILD_SUBREAPER = 36


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may contain spaces and parentheses: parse after its closing paren.
    return raw[raw.rfind(")") + 2 :].split()


def _all_pids() -> list[int]:
    return [int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit()]


def process_state(pid: int) -> str | None:
    """The /proc state letter (R, S, Z, ...), None when the pid does not exist."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def is_alive(pid: int) -> bool:
    """True for a process that still runs; a zombie has exited and only waits to be reaped."""
    state = process_state(pid)
    return state is not None and state not in {"Z", "X"}


def session_members(session_id: int) -> list[int]:
    """Live processes whose session is `session_id`."""
    members = []
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields and int(fields[3]) == session_id and fields[0] not in {"Z", "X"}:
            members.append(pid)
    return members


def tagged(name: str, value: str) -> list[int]:
    """Live processes whose environment has `name=value` (inherited by every descendant that
    does not clear its environment). Processes we may not inspect are skipped."""
    needle = f"{name}={value}".encode()
    found = []
    for pid in _all_pids():
        try:
            environ = (_PROC / str(pid) / "environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in environ.split(b"\0") and is_alive(pid):
            found.append(pid)
    return found


def descendants(root: int) -> list[int]:
    """Live descendants of `root` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields and fields[0] not in {"Z", "X"}:
            children.setdefault(int(fields[1]), []).append(pid)
    found: list[int] = []
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def signal_pids(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def signal_session(session_id: int, sig: signal.Signals) -> None:
    """Signal the session leader's process group, then any member that left that group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session_id, sig)
    signal_pids(session_members(session_id), sig)


def become_subreaper() -> bool:
    """Adopt orphaned descendants, so none escapes to init while we run; False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_adopted(skip: Iterable[int]) -> None:
    """Collect exited orphans we adopted as subreaper, leaving `skip` (Popen's own children)."""
    skipped = set(skip)
    me = os.getpid()
    for pid in _all_pids():
        if pid in skipped:
            continue
        fields = _stat_fields(pid)
        if fields and fields[0] == "Z" and int(fields[1]) == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
