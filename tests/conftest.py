"""Fixtures shared by every test package."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.pulumi_harness import ProgramResult

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


def pick_free_port() -> int:
    """Ask the kernel for a port nobody listens on, so parallel torchrun runs never collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return pick_free_port()


@pytest.fixture
def pulumi_program() -> Callable[..., ProgramResult]:
    """`run_program(stack, overrides=None, secrets=None, preview=False) -> ProgramResult`: the real
    __main__.py under Pulumi mocks (see tests/pulumi_harness.py). Imported lazily so test
    packages that never touch Pulumi do not pay for importing it."""
    from tests.pulumi_harness import run_program

    return run_program
