"""`python -m tests.support.control_plane`, the control plane a developer starts by hand: a stop
signal tears down every process it started, also as a shell's background job, which starts with
SIGINT ignored. (As root each plane's operator has its own webhook certificate directory, so these
planes may run beside the suite's; as another user they share the operator's fixed one, and this
file runs first, before the suite starts its plane.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tools import procs

TAG = "PD_CONTROL_PLANE_TEST"


def ignore_sigint() -> None:
    """What a non-interactive shell does to a job it starts with `&`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_stop_signal_tears_the_background_control_plane_down(
    tmp_path: Path, stop: signal.Signals
) -> None:
    if os.environ.get("PD_E2E_KUBECONFIG"):
        pytest.skip("an external cluster: the local control plane's binaries are not built")
    marker = uuid.uuid4().hex
    plane = subprocess.Popen(
        [sys.executable, "-m", "tests.support.control_plane", "--workdir", str(tmp_path / "plane")],
        cwd=REPO_ROOT,
        env={**os.environ, TAG: marker},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=ignore_sigint,
    )
    try:
        assert plane.stdout is not None
        line = plane.stdout.readline()  # printed once everything is up
        assert line.startswith("control plane up: export KUBECONFIG="), line
        started = [pid for pid in procs.tagged(TAG, marker) if pid != plane.pid]
        assert len(started) >= 6, f"etcd, apiserver, controllers, operator, kwok: {started}"

        plane.send_signal(stop)
        assert plane.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while procs.tagged(TAG, marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert procs.tagged(TAG, marker) == [], "processes outlived the control plane"
    finally:
        if plane.poll() is None:
            plane.kill()
        procs.signal_pids(procs.tagged(TAG, marker), signal.SIGKILL)
