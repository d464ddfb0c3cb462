"""components/interruption.py: the program, sent SIGINT as the language host sends it when the
engine stops an update, exits at once without a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tests.conftest import REPO_ROOT

# The program starts with SIGINT's default handler, as Python sets it up under a language host or
# a terminal: a background job of a non-interactive shell (`make test &` in a script) inherits
# SIGINT ignored, and Python then leaves it ignored.
PROGRAM = """
import asyncio, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from components.interruption import stop_quietly_on_sigint
{install}
async def main():
    print("waiting", flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


def interrupted(install: str) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", PROGRAM.format(install=install)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "waiting\n"
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_an_interrupted_program_exits_130_and_prints_nothing() -> None:
    done = interrupted("stop_quietly_on_sigint()")
    assert (done.returncode, done.stderr) == (130, "")


def test_without_it_python_prints_the_traceback_the_language_host_shows() -> None:
    done = interrupted("")
    assert "KeyboardInterrupt" in done.stderr and "Traceback" in done.stderr
