"""The program stops quietly when it is interrupted.

Who sends SIGINT to the program: the Python language host, when the engine stops the update (a
resource failed, say the image's build or push, or the update was cancelled): pulumi-language-
python 3.260 cancels the program's command with `os.Interrupt`; and a terminal's Ctrl-C, which
reaches the whole foreground process group, the program among them. Python's default raises
KeyboardInterrupt wherever the event loop happens to be and prints its traceback, dozens of lines
of asyncio internals after the error the user needs, which the engine has already printed. The
program has nothing to add: it exits at once, with the conventional 128 + SIGINT, and the engine
and the CLI say why the update stopped.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def stop_quietly_on_sigint() -> None:
    signal.signal(signal.SIGINT, _stop)


def _stop(signum: int, _frame: FrameType | None) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signum)
