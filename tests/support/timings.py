"""The e2e suite's rows of .ci/run's timing table: each module's seconds, its fixtures' setup and
teardown included, and whether it passed, appended to $PD_TIMINGS_FILE (scripts/ci-timings.sh)
when the session ends. Without that variable nothing is written."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path


class ModuleTimings:
    """Seconds and failures per test module, in the order the modules ran."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.failed: set[str] = set()

    def add(self, module: str, seconds: float) -> None:
        self.seconds[module] += seconds

    def fail(self, module: str) -> None:
        self.failed.add(module)

    def rows(self, prefix: str) -> list[str]:
        return [
            f"{prefix} {module}\t{seconds:.0f}\t{'FAILED' if module in self.failed else 'passed'}"
            for module, seconds in self.seconds.items()
        ]

    def write(self, prefix: str, path: str | None = None) -> None:
        target = path if path is not None else os.environ.get("PD_TIMINGS_FILE")
        if not target or not self.seconds:
            return
        with Path(target).open("a") as table:
            table.writelines(row + "\n" for row in self.rows(prefix))
