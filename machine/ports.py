"""A free TCP port on loopback, the one helper the local run, the planes (the one-machine cluster's
and the suite's), the tests and the benchmark share.

Asking the kernel (bind to port 0) alone is not enough: the caller closes the socket and hands
the number to a process that binds it later, and meanwhile the kernel offers the same number to
the next caller. Linux hands bind(0) only odd ports of ip_local_port_range and repeats them
often: two processes asking 3,000 times each were given the same port within 2 seconds 601 times
(this machine, 32768-60999). Two planes starting at once (`make cluster` beside the e2e suite's,
two e2e workers) then gave etcd, an API server or a webhook the same port, and one of them failed
with "connection refused" or talked to the other's.

So every port handed out here is written to a ledger on this machine (a JSON file under the
temporary directory, changed under an exclusive lock), and not handed out again while the
process it was handed to lives, at most HOLD_S: the window in which its component binds it, or
binds it again after a restart (an API server stopped and started by the fault tests). The
kernel still has the last word on what is free now; a ledger that cannot be used (another user's,
unreadable) leaves only the kernel's word, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

LOOPBACK = "127.0.0.1"
LEDGER = Path(tempfile.gettempdir()) / "pytorch-distributed-ports.json"
# A port stays taken this long at most, or until the process it was handed to exits.
HOLD_S = 3600.0
# Numbers the kernel offers that the ledger holds are kept bound while asking again, so it offers
# others; past this many, the ledger is not consulted for this call.
MAX_TRIES = 256


def _kernel_port(host: str) -> socket.socket:
    """A socket bound to a port the kernel chose on `host` (the caller closes it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
    except OSError:
        sock.close()
        raise
    return sock


def _started(pid: int) -> float | None:
    """When process `pid` started (psutil's create time), None when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _current(entries: object, now: float) -> dict[str, dict[str, float]]:
    """The entries that still hold their port: young enough, and their process the one that
    asked (not one that reused its pid)."""
    if not isinstance(entries, dict):
        return {}
    alive: dict[int, float | None] = {}
    kept = {}
    for port, entry in entries.items():
        try:
            at, pid, started = float(entry["at"]), int(entry["pid"]), float(entry["started"])
        except (KeyError, TypeError, ValueError):
            continue
        if pid not in alive:
            alive[pid] = _started(pid)
        if now - at < HOLD_S and alive[pid] == started:
            kept[str(port)] = {"at": at, "pid": pid, "started": started}
    return kept


@contextlib.contextmanager
def _ledger(path: Path) -> Iterator[dict[str, dict[str, float]]]:
    """The ledger's current entries (port -> who and when), written back on exit, all of it
    under an exclusive lock of the file beside it."""
    lock_path = path.with_name(path.name + ".lock")
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            read = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            read = {}
        entries = _current(read, time.time())
        yield entries
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(entries))
        partial.replace(path)


def free_port(host: str = LOOPBACK, ledger: Path = LEDGER) -> int:
    """A port nobody listens on at this moment on `host`, and that no other caller on this
    machine was handed while it may still be about to bind it."""
    try:
        with _ledger(ledger) as entries:
            held: list[socket.socket] = []
            try:
                for _ in range(MAX_TRIES):
                    sock = _kernel_port(host)
                    held.append(sock)
                    port = int(sock.getsockname()[1])
                    if str(port) not in entries:
                        started = _started(os.getpid())
                        if started is not None:
                            entries[str(port)] = {
                                "pid": os.getpid(),
                                "started": started,
                                "at": time.time(),
                            }
                        return port
            finally:
                for sock in held:
                    sock.close()
    except OSError:
        pass  # no ledger to be had here: the kernel's word alone
    with _kernel_port(host) as sock:
        return int(sock.getsockname()[1])
