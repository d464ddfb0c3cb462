"""The one poll loop the suites wait with: a test acts on what it saw happen, never on a sleep
that a loaded machine outlasts."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], bool],
    what: str,
    timeout: float,
    *,
    interval: float = 0.5,
    diagnose: Callable[[], str] | None = None,
) -> None:
    """Return once ``condition()`` holds; fail naming ``what`` (and ``diagnose()``'s account of
    the state, where given) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            detail = f"\n{diagnose()}" if diagnose is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)
