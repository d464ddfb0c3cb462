"""Fixtures for the policy tests: one running policy pack shared by the whole package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.policy.pack_client import Stub, running_pack


@pytest.fixture(scope="session")
def analyzer() -> Iterator[Stub]:
    with running_pack() as stub:
        yield stub
