"""scripts/pulumi-stack.sh (`make preview/up/destroy`): backend, passphrase and CLI handling,
and what tools/pulumi_run.py decides around the command: stale locks, pending operations, the
line after a failure.

The Pulumi CLI itself is not available here: the script's own decisions are tested, with a
stand-in `pulumi` on PATH that records how it was called, and lock files as pulumi 3.260's file
backend writes them (tests/tools/data/pulumi-lock.json is one it wrote). The real CLI meets the
same cases in tests/e2e/test_faults.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "pulumi-stack.sh"
DATA = Path(__file__).resolve().parent / "data"
FAKE_PULUMI = f"""#!{sys.executable}
# Stand-in for the Pulumi CLI: records each call; `whoami` fails (not logged in); `stack export`
# prints $PULUMI_EXPORT; `import --file` records the file; the command named by $PULUMI_FAIL
# writes $PULUMI_FAIL_EVENT to its --event-log and fails (only the first time, if
# $PULUMI_FAIL_ONCE names a file it may create to remember); `config set` stores the value it
# reads from stdin in $PULUMI_CONFIG_STORE, `config get` prints it. Like pulumi 3.260, it knows no
# --event-log flag unless PULUMI_DEBUG_COMMANDS is true.
import json, os, sys
args = sys.argv[1:]
if "--event-log" in args and os.environ.get("PULUMI_DEBUG_COMMANDS") != "true":
    print("error: unknown flag: --event-log", file=sys.stderr)
    sys.exit(255)
with open(os.environ["PULUMI_CALLS"], "a") as calls:
    calls.write(" ".join(args) + " | backend=" + os.environ.get("PULUMI_BACKEND_URL", "") + "\\n")
if args[0] == "whoami":
    sys.exit(1)
store = os.environ.get("PULUMI_CONFIG_STORE", "/nonexistent")
config = json.load(open(store)) if os.path.exists(store) else {{}}
# `--stack NAME` may stand anywhere (`pulumi config --stack NAME set ...`, as cobra allows).
words = [a for i, a in enumerate(args) if a != "--stack" and (i == 0 or args[i - 1] != "--stack")]
if words[:2] == ["config", "get"]:
    if words[-1] not in config:
        sys.exit(1)
    print(config[words[-1]])
if words[:2] == ["config", "set"]:
    config[words[-1]] = sys.stdin.read().strip()
    json.dump(config, open(store, "w"))
if args[:2] == ["stack", "export"]:
    export = os.environ.get("PULUMI_EXPORT")
    print(open(export).read() if export else '{{"version": 3, "deployment": {{}}}}')
if args[0] == "import":
    with open(os.environ["PULUMI_IMPORTS"], "a") as imports:
        imports.write(open(args[args.index("--file") + 1]).read() + "\\n")
once = os.environ.get("PULUMI_FAIL_ONCE")
if args[0] == os.environ.get("PULUMI_FAIL") and not (once and os.path.exists(once)):
    if once:
        open(once, "w").close()
    with open(args[args.index("--event-log") + 1], "a") as log:
        log.write(os.environ["PULUMI_FAIL_EVENT"] + "\\n")
    sys.exit(255)
"""
EVENT_LOG = re.compile(r"--event-log \S*pulumi-events-\S+\.jsonl")
STACK_LOCKS = Path(".pulumi") / "locks" / "organization" / "pytorch-distributed"


def system_path() -> str:
    """A PATH with bash and coreutils but without any pulumi."""
    dirs = [str(Path(shutil.which(tool) or "/bin/x").parent) for tool in ("bash", "dirname")]
    return os.pathsep.join(dict.fromkeys([*dirs, "/usr/bin", "/bin"]))


def run(
    args: list[str], env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def calls_of(calls: Path) -> list[str]:
    """The recorded calls, the event log the script adds to each command named LOG."""
    return [EVENT_LOG.sub("--event-log LOG", line) for line in calls.read_text().splitlines()]


class PingHandler(socketserver.StreamRequestHandler):
    """What a Docker Engine API answers to `GET /_ping`."""

    def handle(self) -> None:
        self.rfile.readline()
        self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nOK")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[str]:
    """A stand-in Docker engine: a unix socket that answers /_ping; its DOCKER_HOST."""
    sock = tmp_path / "engine.sock"
    server = socketserver.UnixStreamServer(str(sock), PingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"unix://{sock}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def fake_pulumi(tmp_path: Path, engine: str) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "pulumi"
    stub.write_text(FAKE_PULUMI)
    stub.chmod(0o755)
    calls = tmp_path / "calls.log"
    env = {
        "PATH": os.pathsep.join([str(bin_dir), system_path()]),
        "PULUMI_CALLS": str(calls),
        "PULUMI_IMPORTS": str(tmp_path / "imports.jsonl"),
        "HOME": str(tmp_path),
        # What `make` passes: the project's .venv.
        "PYTHON": sys.executable,
        # The dev stack builds its image: an engine must answer.
        "DOCKER_HOST": engine,
        "PULUMI_CONFIG_STORE": str(tmp_path / "config.json"),
    }
    return env, calls


def test_missing_pulumi_cli_is_a_clear_error() -> None:
    assert all(not (Path(d) / "pulumi").exists() for d in system_path().split(os.pathsep))

    result = run(["up", "dev"], {"PATH": system_path()})

    assert result.returncode == 1
    assert "the Pulumi CLI is not installed" in result.stderr
    assert "make render STACK=dev" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["deploy", "dev"], "unknown action 'deploy'"),
        (
            ["up"],
            "usage: scripts/pulumi-stack.sh <preview|up|destroy|config> <stack> [pulumi flags...]",
        ),
        (["up", "nope"], "no stack file Pulumi.nope.yaml"),
    ],
)
def test_bad_arguments_are_rejected(args: list[str], message: str) -> None:
    result = run(args, {"PATH": system_path()})

    assert result.returncode == 1
    assert message in result.stderr


def test_file_backend_needs_a_passphrase(fake_pulumi: tuple[dict[str, str], Path]) -> None:
    env, calls = fake_pulumi

    result = run(["preview", "dev"], env)

    assert result.returncode == 1
    assert "export PULUMI_CONFIG_PASSPHRASE" in result.stderr
    assert calls.read_text().splitlines() == ["whoami | backend="]


def test_without_a_backend_the_local_file_backend_and_policy_pack_are_used(
    fake_pulumi: tuple[dict[str, str], Path],
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_CONFIG_PASSPHRASE"] = "local-test-passphrase"
    backend = f"file://{REPO_ROOT}/.pulumi-state"

    result = run(["preview", "dev"], env)

    assert result.returncode == 0, result.stderr
    assert calls_of(calls) == [
        "whoami | backend=",
        f"stack select --create dev | backend={backend}",
        f"stack export --stack dev | backend={backend}",
        "preview --stack dev --diff --policy-pack policy --policy-pack-config "
        f"policy/config/dev.json --event-log LOG | backend={backend}",
    ]


def test_the_fallback_backend_is_named_with_the_line_a_shell_needs(
    fake_pulumi: tuple[dict[str, str], Path],
) -> None:
    env, _ = fake_pulumi
    env["PULUMI_CONFIG_PASSPHRASE"] = "local-test-passphrase"

    result = run(["preview", "dev"], env)

    assert (
        "pulumi-stack.sh: no backend configured; using the local file backend .pulumi-state/ "
        "(`make config STACK=dev CONFIG_ARGS='...'` sets its config; for a bare pulumi in your "
        f"shell: export PULUMI_BACKEND_URL=file://{REPO_ROOT}/.pulumi-state)\n"
    ) in result.stderr


def test_config_runs_on_the_same_backend_reading_the_value_from_stdin(
    fake_pulumi: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """`make config STACK=dev CONFIG_ARGS='set --secret --path KEY'`: the stack selected (made the
    first time) on the backend preview and up use, the value read from stdin, no policy pack."""
    env, calls = fake_pulumi
    env["PULUMI_CONFIG_PASSPHRASE"] = "local-test-passphrase"
    backend = f"file://{REPO_ROOT}/.pulumi-state"
    key = "pytorch-distributed:job.secretEnv.HF_TOKEN"

    result = run(["config", "dev", "set", "--secret", "--path", key], env, stdin="hf_token\n")

    assert result.returncode == 0, result.stderr
    assert calls_of(calls) == [
        "whoami | backend=",
        f"stack select --create dev | backend={backend}",
        f"config --stack dev set --secret --path {key} | backend={backend}",
    ]
    assert json.loads((tmp_path / "config.json").read_text()) == {key: "hf_token"}
    assert "policy" not in result.stderr

    failed = run(["config", "dev", "get", "pytorch-distributed:missing"], env)
    assert failed.returncode == 1


def test_flags_after_the_stack_reach_the_cli(fake_pulumi: tuple[dict[str, str], Path]) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"

    result = run(["up", "prod", "--yes", "--event-log", "/tmp/events.jsonl"], env)

    assert result.returncode == 0, result.stderr
    assert calls_of(calls)[-1] == (
        "up --stack prod --diff --policy-pack policy --policy-pack-config policy/config/prod.json "
        "--yes --event-log /tmp/events.jsonl | backend=s3://team-bucket/pulumi"
    )


def test_a_configured_backend_is_left_alone(fake_pulumi: tuple[dict[str, str], Path]) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"

    result = run(["destroy", "prod"], env)

    assert result.returncode == 0, result.stderr
    assert calls_of(calls) == [
        "stack select --create prod | backend=s3://team-bucket/pulumi",
        "stack export --stack prod | backend=s3://team-bucket/pulumi",
        "destroy --stack prod --event-log LOG | backend=s3://team-bucket/pulumi",
    ]


# -- locks of the file backend ------------------------------------------------------------------


def file_backend(tmp_path: Path, env: dict[str, str], *, version: int | None = 1) -> Path:
    """A file backend as `pulumi login file://...` leaves it (meta.yaml: the store's layout)."""
    state = tmp_path / "state"
    (state / ".pulumi").mkdir(parents=True)
    if version is not None:
        (state / ".pulumi" / "meta.yaml").write_text(f"version: {version}\n")
    env["PULUMI_BACKEND_URL"] = f"file://{state}"
    env["PULUMI_CONFIG_PASSPHRASE"] = "local-test-passphrase"
    return state


def write_lock(lock_dir: Path, *, pid: int, hostname: str) -> Path:
    """A lock as the file backend writes it (the captured file, its pid and host replaced), with
    the `.attrs` file its blob store keeps beside it."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    content = json.loads((DATA / "pulumi-lock.json").read_text())
    content.update(pid=pid, hostname=hostname)
    lock = lock_dir / "9deb4809-f2fb-4261-8f2e-63d7a0d91d92.json"
    lock.write_text(json.dumps(content, separators=(",", ":")))
    shutil.copy(DATA / "pulumi-lock.json.attrs", lock.with_name(lock.name + ".attrs"))
    return lock


def exited_pid() -> int:
    """The pid of a process that ran and is gone (reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def notes(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("pulumi-stack.sh: ")]


def test_a_lock_left_by_a_killed_cli_is_removed_and_up_runs(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    state = file_backend(tmp_path, env)
    pid = exited_pid()
    lock = write_lock(state / STACK_LOCKS / "dev", pid=pid, hostname=socket.gethostname())

    result = run(["up", "dev", "--yes"], env)

    assert result.returncode == 0, result.stderr
    assert notes(result) == [
        "pulumi-stack.sh: stack dev was left locked by a pulumi command that is no longer "
        f"running (pid {pid}, root@{socket.gethostname()}, since 2026-12-03T18:58:02; killed or "
        "crashed): removing its lock and going on"
    ]
    assert list(lock.parent.iterdir()) == []
    assert calls_of(calls)[-1].startswith("up --stack dev --diff")


def test_the_legacy_layout_keeps_locks_under_the_stack_name(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, _ = fake_pulumi
    state = file_backend(tmp_path, env, version=None)
    lock = write_lock(
        state / ".pulumi" / "locks" / "dev", pid=exited_pid(), hostname=socket.gethostname()
    )

    result = run(["destroy", "dev"], env)

    assert result.returncode == 0, result.stderr
    assert not lock.exists()


def test_a_lock_of_a_running_command_stops_up_and_stays(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    state = file_backend(tmp_path, env)
    lock = write_lock(state / STACK_LOCKS / "dev", pid=os.getpid(), hostname=socket.gethostname())

    result = run(["up", "dev"], env)

    assert result.returncode == 1
    [line] = notes(result)
    assert "is locked by a pulumi command that is still running" in line
    assert f"pid {os.getpid()}" in line and "wait for it to finish" in line
    assert lock.exists() and lock.with_name(lock.name + ".attrs").exists()
    assert not any(call.startswith("up ") for call in calls_of(calls))


def test_a_lock_from_another_machine_is_never_removed(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    state = file_backend(tmp_path, env)
    lock = write_lock(state / STACK_LOCKS / "dev", pid=exited_pid(), hostname="ci-runner-7")

    result = run(["destroy", "dev"], env)

    assert result.returncode == 1
    [line] = notes(result)
    assert "locked from another machine" in line and "root@ci-runner-7" in line
    assert "`pulumi cancel --stack dev`" in line
    assert lock.exists()
    assert not any(call.startswith("destroy ") for call in calls_of(calls))


def test_preview_reports_a_stale_lock_and_leaves_it(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    state = file_backend(tmp_path, env)
    lock = write_lock(state / STACK_LOCKS / "dev", pid=exited_pid(), hostname=socket.gethostname())

    result = run(["preview", "dev"], env)

    assert result.returncode == 0, result.stderr
    [line] = notes(result)
    assert "the next `make up` or `make destroy` removes it" in line
    assert lock.exists()
    assert calls_of(calls)[-1].startswith("preview --stack dev")


def test_another_stacks_lock_is_none_of_its_business(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, _ = fake_pulumi
    state = file_backend(tmp_path, env)
    lock = write_lock(state / STACK_LOCKS / "prod", pid=os.getpid(), hostname=socket.gethostname())

    result = run(["up", "dev"], env)

    assert result.returncode == 0, result.stderr
    assert notes(result) == []
    assert lock.exists()


# -- pending operations -------------------------------------------------------------------------


def test_up_after_an_interrupted_update_refreshes_and_clears_the_pending_creates_first(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["PULUMI_EXPORT"] = str(DATA / "pending-export.json")

    result = run(["up", "dev", "--yes"], env)

    assert result.returncode == 0, result.stderr
    [line] = notes(result)
    assert "stopped with 3 operation(s) unfinished (creating training-job-job, creating " in line
    assert "adopting objects that already exist (nothing is made twice)" in line
    assert [call.split(" | ")[0] for call in calls_of(calls)][1:] == [
        "stack export --stack dev",
        "refresh --stack dev --yes --skip-preview --clear-pending-creates --event-log LOG",
        "up --stack dev --diff --policy-pack policy --policy-pack-config policy/config/dev.json "
        "--yes --event-log LOG",
    ]


def test_destroy_after_an_interrupted_update_imports_what_it_was_creating(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["PULUMI_EXPORT"] = str(DATA / "pending-export.json")

    result = run(["destroy", "dev"], env)

    assert result.returncode == 0, result.stderr
    made = [call.split(" | ")[0] for call in calls_of(calls)][1:]
    assert made[0] == "stack export --stack dev"
    assert re.fullmatch(
        r"import --stack dev --file \S+\.json --yes --skip-preview --protect=false "
        r"--generate-code=false",
        made[1],
    )
    assert made[2:] == [
        "refresh --stack dev --yes --skip-preview --clear-pending-creates --event-log LOG",
        "destroy --stack dev --event-log LOG",
    ]
    # The job only: the retained claim is forgotten by destroy anyway, the secret is in the state.
    [imported] = [json.loads(line) for line in Path(env["PULUMI_IMPORTS"]).read_text().splitlines()]
    export = json.loads((DATA / "pending-export.json").read_text())
    job = export["deployment"]["pending_operations"][0]["resource"]
    assert imported == {
        "nameTable": {"parent": job["parent"], "provider": job["provider"].rsplit("::", 1)[0]},
        "resources": [
            {
                "type": "kubernetes:kubeflow.org/v1:PyTorchJob",
                "name": "training-job-job",
                "id": "default/ddp-dev",
                "parent": "parent",
                "provider": "provider",
            }
        ],
    }


# -- a failed command ends with one line --------------------------------------------------------


def test_a_failed_up_names_the_unreachable_api_server(
    fake_pulumi: tuple[dict[str, str], Path],
) -> None:
    env, _ = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["PULUMI_FAIL"] = "up"
    urn = (
        "urn:pulumi:dev::pytorch-distributed::pytorch-distributed:index:TrainingEnvironment"
        "$pytorch-distributed:index:PyTorchJob$kubernetes:kubeflow.org/v1:PyTorchJob::training-job-job"
    )
    env["PULUMI_FAIL_EVENT"] = json.dumps(
        {
            "sequence": 7,
            "timestamp": 1796324387,
            "diagnosticEvent": {
                "urn": urn,
                "message": 'resource "' + urn + '" was not successfully created by the Kubernetes'
                ' API server: Patch "https://10.0.0.1:6443/apis/kubeflow.org/v1/namespaces/default'
                '/pytorchjobs/ddp-dev": dial tcp 10.0.0.1:6443: connect: connection refused\n',
                "color": "never",
                "severity": "error",
            },
        }
    )

    result = run(["up", "dev"], env)

    assert result.returncode == 255
    assert notes(result) == [
        "pulumi-stack.sh: the Kubernetes API server https://10.0.0.1:6443 could not be reached: "
        "what was done is recorded in the state; once it answers, `make up STACK=dev` goes on "
        "from there (objects made meanwhile are adopted, not made twice)"
    ]


DOCKER_IMAGE_URN = (
    "urn:pulumi:dev::pytorch-distributed::pytorch-distributed:index:TrainingEnvironment"
    "$pytorch-distributed:index:TrainingImage$docker:index/image:Image::training-image-image"
)


def push_broke_off(address: str) -> str:
    """The error podman's push reports when its connection to the registry closes midway."""
    return json.dumps(
        {
            "sequence": 9,
            "timestamp": 1796324388,
            "diagnosticEvent": {
                "urn": DOCKER_IMAGE_URN,
                "message": "error reading push output: writing blob: Patch "
                f'"http://{address}/v2/pytorch-distributed/blobs/uploads/9f1c?_state=x": use of'
                " closed network connection\n",
                "color": "never",
                "severity": "error",
            },
        }
    )


@pytest.fixture
def registry_listening() -> Iterator[str]:
    """Something that accepts connections on loopback, as a registry that is back."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


def test_an_up_whose_push_broke_off_pushes_again_once_the_registry_answers(
    fake_pulumi: tuple[dict[str, str], Path], registry_listening: str, tmp_path: Path
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["PULUMI_FAIL"] = "up"
    env["PULUMI_FAIL_ONCE"] = str(tmp_path / "failed-once")
    env["PULUMI_FAIL_EVENT"] = push_broke_off(registry_listening)

    result = run(["up", "dev"], env)

    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in calls_of(calls) if line.startswith("up ")] == ["up", "up"]
    assert notes(result) == [
        f"pulumi-stack.sh: the push to the registry {registry_listening} broke off midway; it "
        "answers: pushing again"
    ]


def test_a_push_that_breaks_off_again_is_explained_after_the_second_try(
    fake_pulumi: tuple[dict[str, str], Path], registry_listening: str
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["PULUMI_FAIL"] = "up"
    env["PULUMI_FAIL_EVENT"] = push_broke_off(registry_listening)

    result = run(["up", "dev"], env)

    assert result.returncode == 255
    assert len([line for line in calls_of(calls) if line.startswith("up ")]) == 2
    assert notes(result)[-1] == (
        f"pulumi-stack.sh: the connection to the registry {registry_listening} broke off during "
        "the push: what was done is recorded in the state; `make up STACK=dev` pushes again and "
        "goes on"
    )


def test_a_push_cut_off_by_a_registry_that_is_gone_is_not_retried(
    fake_pulumi: tuple[dict[str, str], Path],
) -> None:
    env, calls = fake_pulumi
    with socket.create_server(("127.0.0.1", 0)) as server:
        gone = f"127.0.0.1:{server.getsockname()[1]}"
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["PULUMI_FAIL"] = "up"
    env["PULUMI_FAIL_EVENT"] = push_broke_off(gone)

    result = run(["up", "dev"], env)

    assert result.returncode == 255
    assert len([line for line in calls_of(calls) if line.startswith("up ")]) == 1
    assert notes(result) == [
        f"pulumi-stack.sh: the registry {gone} could not be reached while the image was built or "
        "pushed: what was done is recorded in the state; once it answers, `make up STACK=dev` "
        "pushes again and goes on"
    ]


def test_a_failed_up_without_a_docker_engine_names_make_cluster_and_docker_host(
    fake_pulumi: tuple[dict[str, str], Path],
) -> None:
    """What the Docker provider says when it cannot connect (pulumi-docker 4.11's words)."""
    env, _ = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["PULUMI_FAIL"] = "destroy"
    env["PULUMI_FAIL_EVENT"] = json.dumps(
        {
            "sequence": 3,
            "timestamp": 1796324387,
            "diagnosticEvent": {
                "urn": "urn:pulumi:dev::pytorch-distributed::pulumi:providers:docker::docker",
                "message": "failed to connect to any docker daemon\n",
                "color": "never",
                "severity": "error",
            },
        }
    )

    result = run(["destroy", "dev"], env)

    [line] = notes(result)
    assert "stack dev builds its image (image.build: true) and no Docker-compatible engine" in line
    assert "`make cluster`" in line and "DOCKER_HOST" in line


# -- what make passes: the event log, the cluster's registry password; policy defaults -----------


def test_event_log_from_make_reaches_the_cli_as_its_flag(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["EVENT_LOG"] = str(tmp_path / "events.jsonl")

    result = run(["up", "dev", "--yes"], env)

    assert result.returncode == 0, result.stderr
    assert calls_of(calls)[-1].split(" | ")[0] == (
        "up --stack dev --diff --policy-pack policy --policy-pack-config policy/config/dev.json "
        f"--yes --event-log {tmp_path / 'events.jsonl'}"
    )


def test_without_a_docker_engine_a_building_stack_stops_in_one_line_before_anything_runs(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    env["DOCKER_HOST"] = f"unix://{tmp_path / 'no-engine.sock'}"

    for action in ("preview", "up"):
        result = run([action, "dev"], env)

        assert result.returncode == 2, result.stderr
        assert notes(result) == [
            "pulumi-stack.sh: stack dev builds its image (image.build: true) and no "
            f"Docker-compatible engine answers at unix://{tmp_path / 'no-engine.sock'}: start "
            "Docker Engine, or set DOCKER_HOST to one (`make cluster` serves podman's at "
            "unix://<clone>/.cluster/podman.sock; `make up STACK=local` uses it)"
        ]
        assert "Traceback" not in result.stderr
    assert [call.split(" | ")[0] for call in calls_of(calls)] == ["stack select --create dev"] * 2


def test_the_clusters_registry_password_becomes_the_stacks_secret_once(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    password = tmp_path / "registry-password"
    password.write_text("cluster-pa55word-9d1e\n")
    env["CLUSTER_REGISTRY_PASSWORD_FILE"] = str(password)

    first = run(["preview", "prod"], env)
    second = run(["preview", "prod"], env)

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert notes(first) == [
        f"pulumi-stack.sh: stack prod: secret pytorch-distributed:registryPassword set from "
        f"{password}"
    ]
    assert notes(second) == []
    made = [call.split(" | ")[0] for call in calls_of(calls)]
    key = "pytorch-distributed:registryPassword"
    assert made.count(f"config set --stack prod --secret {key}") == 1
    assert made.count(f"config get --stack prod {key}") == 2
    assert "cluster-pa55word" not in calls.read_text()  # never on a command line
    assert json.loads(Path(env["PULUMI_CONFIG_STORE"]).read_text()) == {
        key: "cluster-pa55word-9d1e"
    }


def test_a_stack_without_policy_config_runs_the_pack_with_its_defaults_and_says_so(
    tmp_path: Path, fake_pulumi: tuple[dict[str, str], Path]
) -> None:
    """A checkout with a stack of its own (the script works in the directory it lives in)."""
    env, calls = fake_pulumi
    env["PULUMI_BACKEND_URL"] = "s3://team-bucket/pulumi"
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "tools").mkdir()
    shutil.copy(SCRIPT, checkout / "scripts")
    for name in ("__init__.py", "pulumi_run.py"):
        shutil.copy(REPO_ROOT / "tools" / name, checkout / "tools")
    (checkout / "machine").mkdir()
    for name in ("__init__.py", "engine_api.py"):  # what pulumi_run imports: the engine's ping
        shutil.copy(REPO_ROOT / "machine" / name, checkout / "machine")
    shutil.copy(REPO_ROOT / "Pulumi.yaml", checkout)
    shutil.copy(REPO_ROOT / "Pulumi.prod.yaml", checkout / "Pulumi.team.yaml")

    result = subprocess.run(
        [str(checkout / "scripts" / "pulumi-stack.sh"), "preview", "team"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert notes(result) == [
        "pulumi-stack.sh: stack team has no policy/config/team.json: the policy pack runs with "
        "its defaults (no opt-outs: docs/reference/policy.md)"
    ]
    assert calls_of(calls)[-1].split(" | ")[0] == (
        "preview --stack team --diff --policy-pack policy --event-log LOG"
    )
