"""The real-engine suite imports cleanly: `make test` runs without a control plane, so a module
of tests/e2e that no longer imports (a renamed constant) would otherwise surface only in
`make e2e`, after its long tool build."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_every_e2e_module_is_collected() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/e2e",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " error" not in done.stdout.splitlines()[-1], done.stdout
