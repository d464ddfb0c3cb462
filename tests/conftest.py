"""Fixtures shared by every test package."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from tests.pulumi_harness import ProgramResult
    from tools.s3_server import S3Endpoint

REPO_ROOT = Path(__file__).resolve().parent.parent
# Fixtures that start real processes (the shared 2-rank reference run, the supervisor over
# stand-in replicas): every test that uses one is `slow`.
PROCESS_FIXTURES = frozenset({"reference_run", "make_job"})
# Each pytest-xdist worker gets one S3 server (a JVM, about a second to start and 100 MB) and
# each test a bucket of its own in it.
_BUCKETS = iter(range(1, 1 << 30))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, so `-m "not slow"` sees the mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark by fixture, so a new test on the reference run or the supervisor lands in the slow
    set without anyone remembering to mark it; tests that start processes themselves carry
    `@pytest.mark.slow` by hand."""
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def own_event_loop() -> Iterator[None]:
    """Each test with a current event loop of its own, closed after it: a `pulumi.ResourceHook`
    made outside a program schedules its registration on the current loop, and the mocks' harness
    leaves none when it ends, so a test's outcome would otherwise depend on what ran before it in
    its worker."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    loop.close()
    asyncio.set_event_loop(None)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


def committed_epochs(checkpoint_dir: Path) -> int:
    """Epochs of the newest committed checkpoint, from the trainer's manifest (0 if none)."""
    # Imported here: the policy and program tests share this module and never need torch.
    from trainer.checkpoint import CheckpointError, CheckpointStore

    try:
        entries = CheckpointStore(checkpoint_dir).manifest()
    except CheckpointError:
        return 0
    return max((entry.epochs_completed for entry in entries), default=0)


def wait_for_runner(
    condition: Callable[[], bool],
    what: str,
    runner: subprocess.Popen[str],
    timeout: float = 300,
) -> None:
    """Poll ``condition`` while ``runner`` (a `tools.run_local` process) lives; fail with its
    output if it exits first, since a runner that died is the real finding."""

    def reached() -> bool:
        if condition():
            return True
        if runner.poll() is not None:
            out = runner.stdout.read() if runner.stdout else ""
            pytest.fail(f"the runner exited ({runner.returncode}) before {what}\n{out}")
        return False

    wait_until(reached, what, timeout, interval=0.05)


@pytest.fixture
def pulumi_program() -> Callable[..., ProgramResult]:
    """`run_program(stack, overrides=None, secrets=None, preview=False) -> ProgramResult`: the real
    __main__.py under Pulumi mocks (see tests/pulumi_harness.py). Imported lazily so test
    packages that never touch Pulumi do not pay for importing it."""
    from tests.pulumi_harness import run_program

    return run_program


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """A real S3-compatible server (tools/s3_server.py: S3Proxy) on loopback for this worker."""
    from tools.s3_server import running_server

    directory = tmp_path_factory.mktemp("s3")
    with running_server(directory / "data", log=directory / "s3proxy.log") as endpoint:
        yield endpoint


@pytest.fixture
def s3_bucket(s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh bucket on the worker's server, with this process's environment pointing boto3 at
    it (as a pod's is); its name."""
    from trainer.storage import open_storage
    from trainer.storage import s3 as s3_backend

    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    s3_backend.forget_clients()  # a client made before the test knew another endpoint
    bucket = f"test-{next(_BUCKETS)}"
    open_storage(f"s3://{bucket}").create_bucket()
    yield bucket
    s3_backend.forget_clients()
