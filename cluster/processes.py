"""The processes a test plane starts (the control plane's components, the real node's daemons):
each in a session of its own with its output in a log, waited on until ready, and torn down
session by session. Shared by cluster/control_plane.py and cluster/real_node.py."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

STARTUP_TIMEOUT = 120.0


class ControlPlaneError(RuntimeError):
    """A component did not start; the message names it and ends with its log's last lines."""


@dataclass
class PlaneProcess:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]

    def tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def launch(
    name: str, argv: list[str], *, workdir: Path, env: dict[str, str] | None = None
) -> PlaneProcess:
    """Start `argv` in a session of its own, its output in WORKDIR/NAME.log."""
    log_path = workdir / f"{name}.log"
    log = log_path.open("ab")
    popen = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=workdir,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    return PlaneProcess(name, popen, log_path, log)


def terminate(processes: list[PlaneProcess], grace: float = 15) -> None:
    """SIGTERM each process's session (newest first), SIGKILL what outlives `grace` seconds."""
    for process in reversed(processes):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.popen.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in reversed(processes):
        try:
            process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait()
        process.log.close()


def wait_for(process: PlaneProcess, what: str, ready: Callable[[], bool]) -> None:
    """Poll `ready` until true; fail naming `process` if it exits or STARTUP_TIMEOUT passes."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise ControlPlaneError(
                f"{process.name} exited ({process.popen.returncode}) before {what}:\n"
                + process.tail()
            )
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(0.3)
    raise ControlPlaneError(
        f"{process.name}: no {what} after {STARTUP_TIMEOUT:.0f}s:\n" + process.tail()
    )


def http_ok(url: str, *, ca: Path | None = None, token: str | None = None) -> bool:
    """`url` answers 200 (over TLS checked against `ca`, with a bearer `token`)."""
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=2, context=context) as response:
        return response.status == 200
