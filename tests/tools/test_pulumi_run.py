"""tools/pulumi_run.py's decisions on their own: which lock is stale, where the backend keeps
them, which pending creates destroy must import, and the one line after a failure. The script
around them (scripts/pulumi-stack.sh with a stand-in CLI) is tested in test_pulumi_stack.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tools.pulumi_run import (
    Failure,
    LockState,
    Options,
    StackLock,
    event_log_path,
    explain,
    file_backend_dir,
    lock_state,
    parse,
    pending_operations,
    process_exists,
    remove_torn_metadata,
    stack_lock_dir,
    stack_state_dir,
    to_import,
)

DATA = Path(__file__).resolve().parent / "data"
KUBERNETES_URN_TYPE = "kubernetes:kubeflow.org/v1:PyTorchJob"


def captured_lock(tmp_path: Path, **changes: object) -> StackLock:
    content = json.loads((DATA / "pulumi-lock.json").read_text())
    content.update(changes)
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(content))
    return StackLock.read(path)


def test_the_captured_lock_reads_as_the_cli_wrote_it(tmp_path: Path) -> None:
    lock = StackLock.read(DATA / "pulumi-lock.json")
    assert (lock.pid, lock.username, lock.hostname) == (30960, "root", "vm")
    assert lock.holder == "pid 30960, root@vm, since 2026-12-03T18:58:02"


@pytest.mark.parametrize(
    ("hostname", "alive", "state"),
    [
        ("vm", False, LockState.STALE),
        ("vm", True, LockState.LIVE),
        ("other", False, LockState.ELSEWHERE),
        ("other", True, LockState.ELSEWHERE),
    ],
)
def test_only_a_lock_of_a_gone_process_on_this_machine_is_stale(
    tmp_path: Path, hostname: str, alive: bool, state: LockState
) -> None:
    lock = captured_lock(tmp_path)
    assert lock_state(lock, hostname=hostname, alive=lambda _pid: alive) is state


@pytest.mark.parametrize("content", ["", "{", '{"pid": "x"}', "[]", '{"username": "root"}'])
def test_a_lock_that_does_not_parse_is_unreadable_never_stale(tmp_path: Path, content: str) -> None:
    path = tmp_path / "lock.json"
    path.write_text(content)
    lock = StackLock.read(path)
    assert lock_state(lock, hostname="vm", alive=lambda _pid: False) is LockState.UNREADABLE


def test_process_exists_tells_running_gone_and_zombie_apart() -> None:
    assert process_exists(os.getpid())
    child = subprocess.Popen(["sleep", "0"])
    # Exited but not reaped yet: a zombie, as a killed CLI whose parent died with it.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert not process_exists(child.pid)
    child.wait()
    assert not process_exists(child.pid)
    assert not process_exists(0)


def test_file_backend_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/ml")
    assert file_backend_dir("file:///srv/state") == Path("/srv/state")
    assert file_backend_dir("file://~/state") == Path("/home/ml/state")
    assert file_backend_dir("file:///srv/state?no_tmp_dir=true") == Path("/srv/state")
    assert file_backend_dir("s3://bucket/state") is None
    assert file_backend_dir("https://api.pulumi.com") is None


def test_the_lock_directory_follows_the_store_layout(tmp_path: Path) -> None:
    locks = tmp_path / ".pulumi" / "locks"
    assert stack_lock_dir(tmp_path, "pytorch-distributed", "dev") == locks / "dev"
    (tmp_path / ".pulumi").mkdir()
    (tmp_path / ".pulumi" / "meta.yaml").write_text("version: 1\n")
    assert (
        stack_lock_dir(tmp_path, "pytorch-distributed", "dev")
        == locks / "organization" / "pytorch-distributed" / "dev"
    )
    (tmp_path / ".pulumi" / "meta.yaml").write_text("version: 0\n")
    assert stack_lock_dir(tmp_path, "pytorch-distributed", "dev") == locks / "dev"


def test_pending_operations_and_what_destroy_imports() -> None:
    pending = pending_operations((DATA / "pending-export.json").read_text())
    assert [(op.kind, op.name, op.retained) for op in pending] == [
        ("creating", "training-job-job", False),
        ("creating", "training-checkpoints-claim", True),
        ("updating", "training-registry-secret", False),
    ]
    assert [op.name for op in to_import(pending)] == ["training-job-job"]
    assert pending[0].kubernetes_id() == "default/ddp-dev"
    assert pending_operations("") == []
    assert pending_operations('{"version": 3, "deployment": {}}') == []


def test_event_log_path_from_the_users_flags() -> None:
    assert event_log_path(["pulumi", "up", "--event-log", "/tmp/e.jsonl"]) == Path("/tmp/e.jsonl")
    assert event_log_path(["pulumi", "up", "--event-log=/tmp/e.jsonl"]) == Path("/tmp/e.jsonl")
    assert event_log_path(["pulumi", "up", "--yes"]) is None


@pytest.mark.parametrize(
    ("returncode", "errors", "expected"),
    [
        (
            255,
            [
                Failure(
                    "configured Kubernetes cluster is unreachable: unable to load schema "
                    'information from the API server: Get "https://127.0.0.1:6443/openapi/v2":'
                    " dial tcp 127.0.0.1:6443: connect: connection refused",
                    "pulumi:providers:kubernetes",
                )
            ],
            "the Kubernetes API server https://127.0.0.1:6443 could not be reached",
        ),
        (
            255,
            [
                Failure(
                    "error reading push output: pinging container registry 127.0.0.1:5000: Get"
                    ' "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection'
                    " refused",
                    "docker:index/image:Image",
                )
            ],
            "the registry 127.0.0.1:5000 could not be reached while the image was built or pushed",
        ),
        (
            255,
            [Failure("update canceled", "")],
            "the command was interrupted",
        ),
        (
            255,
            [
                Failure("context canceled", ""),
                Failure("rpc error: code = Unavailable desc = error reading from server: EOF", ""),
            ],
            "the command was interrupted",
        ),
        (
            255,
            [Failure("timed out waiting for the condition", KUBERNETES_URN_TYPE)],
            "is the training operator running",
        ),
        (-signal.SIGKILL, [], "pulumi was stopped by SIGKILL"),
    ],
)
def test_a_failure_is_explained_in_one_line(
    returncode: int, errors: list[Failure], expected: str
) -> None:
    line = explain("up", "dev", returncode, errors)
    assert line is not None
    assert expected in line
    assert "\n" not in line
    assert "what was done is recorded in the state" in line
    assert "`make up STACK=dev`" in line


def test_a_preview_changed_nothing() -> None:
    refused = Failure("dial tcp 127.0.0.1:6443: connect: connection refused", "")
    line = explain("preview", "dev", 255, [refused])
    assert line == (
        "the Kubernetes API server could not be reached: nothing was changed; once it answers, "
        "run `make preview STACK=dev` again"
    )


def test_a_failure_of_no_known_kind_adds_no_line() -> None:
    """A policy violation or a bad setting says what is wrong itself, in one line."""
    violation = Failure("checkpoint-claim-protection: mandatory policy violated", "")
    assert explain("up", "dev", 255, [violation]) is None
    assert explain("up", "dev", 255, []) is None


def test_the_options_before_the_cli_argv() -> None:
    argv = ["pulumi", "up", "--stack", "dev"]
    assert parse(["up", "dev", "--", *argv]) == Options("up", "dev", argv)
    assert parse(
        ["up", "dev", "--event-log", "/e.jsonl", "--registry-password-file", "/p", "--", *argv]
    ) == Options("up", "dev", argv, Path("/e.jsonl"), Path("/p"))
    # The CLI's own flags after `--` are its own, whatever they look like.
    assert parse(["preview", "dev", "--", "pulumi", "--event-log", "x"]) == Options(
        "preview", "dev", ["pulumi", "--event-log", "x"]
    )
    for wrong in (
        ["up", "dev", "pulumi"],
        ["deploy", "dev", "--", "pulumi"],
        ["up", "dev", "--event-log", "--", "pulumi"],
        ["up", "dev", "--yes", "x", "--", "pulumi"],
        ["up", "dev", "--"],
    ):
        assert parse(wrong) is None, wrong


def test_the_state_directory_follows_the_store_layout(tmp_path: Path) -> None:
    stacks = tmp_path / ".pulumi" / "stacks"
    assert stack_state_dir(tmp_path, "pytorch-distributed") == stacks
    (tmp_path / ".pulumi").mkdir()
    (tmp_path / ".pulumi" / "meta.yaml").write_text("version: 1\n")
    assert stack_state_dir(tmp_path, "pytorch-distributed") == stacks / "pytorch-distributed"


def test_only_the_stacks_empty_metadata_files_are_removed(tmp_path: Path) -> None:
    """A killed command's torn write: the state whole, its `.attrs` empty, the new state a `.tmp`
    never renamed. Only the empty metadata of this stack goes; the rest stays as it was."""
    files = {
        "dev.json": '{"version": 3}',
        "dev.json.attrs": "",
        "dev.json.bak": '{"version": 3}',
        "dev.json.bak.attrs": '{"md5": "x"}',
        "dev.json.1a2b.tmp": '{"version": 3, "newer": true}',
        "prod.json": '{"version": 3}',
        "prod.json.attrs": "",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert remove_torn_metadata(tmp_path, "dev") == [tmp_path / "dev.json.attrs"]
    left = {path.name for path in tmp_path.iterdir()}
    assert left == set(files) - {"dev.json.attrs"}
    assert remove_torn_metadata(tmp_path, "dev") == []
