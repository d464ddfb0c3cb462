"""One `pulumi preview|up|destroy` as `make` runs it (scripts/pulumi-stack.sh hands over here):
first clear what an interrupted command left on the stack, then run it, then say in one line why
it failed and what the next command does. `config` (`make config`) only selects the stack,
creating it the first time, and runs `pulumi config ...` on it as it is, reading the terminal.

    python3 -m tools.pulumi_run ACTION STACK [--event-log FILE] [--registry-password-file FILE] \
        -- PULUMI_ARGV...

`--event-log FILE` (`make ... EVENT_LOG=FILE`) also writes the engine's events to FILE, one JSON
line each, as they happen; pulumi 3.260 hides that flag of its own unless PULUMI_DEBUG_COMMANDS
is true, which is set here for the CLI only, as Pulumi's Automation API does: a user sets
nothing. `--registry-password-file FILE` (the one-machine cluster's, which `make ... STACK=local`
passes) sets the stack's secret `registryPassword` from FILE when it is missing or differs.

What an interrupted `pulumi up` or `destroy` (a killed CLI, a laptop gone to sleep, a cancelled
CI job) leaves, and what happens to it here:

- An empty metadata file beside the stack's state (the file backend writes it in place, before
  it renames the new state into place): removed, so the stack reads again (`open_stack`).
- A lock. The file backend (`file://...`, `.pulumi-state/` by default) keeps one JSON file per
  running update under `.pulumi/locks/` (pkg/backend/diy/lock.go in pulumi 3.260: `pid`,
  `username`, `hostname`, `timestamp`), and a killed CLI never deletes its own. A lock written on
  this machine by a process that is gone is removed (with the `.attrs` file the backend's blob
  store keeps beside it); a live process's lock, or one from another machine, stops `up` and
  `destroy` with what to do. Other backends keep their locks themselves and say so.
- Pending operations: resources the engine had started on when it was stopped. `up` first runs
  `pulumi refresh --clear-pending-creates`: the state is read back from the cluster and the
  creates that were in flight are forgotten, so the update creates them again. The Kubernetes
  provider applies server-side and a create of an existing object is an apply to it, under the
  field manager every object of the stack carries (builders.manifests.FIELD_MANAGER): the
  object is adopted as it is, with its UID and its data, never made twice. `destroy` first
  imports the Kubernetes objects whose create was in flight (except a retained claim, which
  destroy only forgets anyway), so it deletes them instead of leaving them unmanaged.

Standard library only (so is its one project import, machine/engine_api.py): this runs with the
`python3` that runs the script, which need not be a virtualenv with the development tools.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import unquote, urlsplit

from machine.engine_api import engine_answers

PREFIX = "pulumi-stack.sh: "
ACTIONS = ("preview", "up", "destroy", "config")
# pulumi-kubernetes names an object `<namespace>/<name>` (cluster-scoped: `<name>`).
KUBERNETES_PREFIX = "kubernetes:"
EVENT_LOG_FLAG = "--event-log"


class StackError(Exception):
    """A reason not to run the command, already phrased for the user (one line); `exit_code` 2
    for a mistake to fix before anything runs, 1 for a state that blocks."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# -- locks of the file backend ------------------------------------------------------------------


class LockState(Enum):
    STALE = "stale"  # written on this machine by a process that is gone
    LIVE = "live"  # its process still runs on this machine
    ELSEWHERE = "elsewhere"  # written on another machine: nothing here can tell
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class StackLock:
    """One lock file, as the file backend writes it."""

    path: Path
    pid: int | None
    username: str
    hostname: str
    timestamp: str

    @classmethod
    def read(cls, path: Path) -> StackLock:
        try:
            content = json.loads(path.read_text())
            pid = int(content["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return cls(path, None, "", "", "")
        return cls(
            path,
            pid,
            str(content.get("username", "")),
            str(content.get("hostname", "")),
            str(content.get("timestamp", "")),
        )

    @property
    def holder(self) -> str:
        return f"pid {self.pid}, {self.username}@{self.hostname}, since {self.timestamp[:19]}"

    def remove(self) -> None:
        """The lock and the metadata file the backend's blob store writes beside each object."""
        self.path.unlink(missing_ok=True)
        self.path.with_name(self.path.name + ".attrs").unlink(missing_ok=True)


def process_exists(pid: int) -> bool:
    """Whether a process with this pid still runs here. Another user's process counts (signalling
    it is only refused). A zombie (exited, not yet reaped: a killed CLI whose parent died with it)
    does not, where psutil can tell (the project's .venv, which `make` passes as PYTHON). Not
    machine.procs.is_alive: it calls a process it may not inspect gone, the unsafe side here."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        import psutil
    except ImportError:
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def lock_state(
    lock: StackLock, *, hostname: str, alive: Callable[[int], bool] = process_exists
) -> LockState:
    """Only a lock written on this machine by a process that no longer exists is stale: the pid
    of another machine means nothing here, and a live pid is never second-guessed (if it was
    reused by something else, the message says how to clear the lock by hand)."""
    if lock.pid is None:
        return LockState.UNREADABLE
    if lock.hostname != hostname:
        return LockState.ELSEWHERE
    return LockState.LIVE if alive(lock.pid) else LockState.STALE


def file_backend_dir(url: str) -> Path | None:
    """The directory of a `file://` backend URL (`file://~/state` included); None for others."""
    if not url.startswith("file://"):
        return None
    parts = urlsplit(url)
    path = unquote(parts.netloc + parts.path)
    return Path(path).expanduser()


def project_scoped(backend: Path) -> bool:
    """Whether the store keeps stacks per project: since its version 1 (`.pulumi/meta.yaml`),
    not in the legacy layout (no meta.yaml, or version 0)."""
    try:
        meta = (backend / ".pulumi" / "meta.yaml").read_text()
    except OSError:
        return False
    version = re.search(r"^version:\s*(\d+)", meta, re.MULTILINE)
    return version is None or int(version.group(1)) != 0


def stack_lock_dir(backend: Path, project: str, stack: str) -> Path:
    """Where the backend keeps the stack's locks."""
    locks = backend / ".pulumi" / "locks"
    return locks / "organization" / project / stack if project_scoped(backend) else locks / stack


def stack_state_dir(backend: Path, project: str) -> Path:
    """Where the backend keeps the project's stacks' states (`<stack>.json`, its `.bak`)."""
    stacks = backend / ".pulumi" / "stacks"
    return stacks / project if project_scoped(backend) else stacks


def remove_torn_metadata(state_dir: Path, stack: str) -> list[Path]:
    """The stack's empty metadata files, removed. The backend's blob store (gocloud's fileblob)
    writes an object to a temporary file and renames it into place, but writes the `.attrs` file
    beside it in place, before the rename: a command killed in between leaves that file empty,
    the object whole (the previous state: the new one is the `.tmp` file never renamed), and every
    command on the stack then fails with `failed to load checkpoint: EOF`. Without its metadata
    file the object reads as it is; an empty one is never valid (it holds JSON)."""
    torn = [path for path in sorted(state_dir.glob(f"{stack}.json*.attrs")) if is_empty(path)]
    for path in torn:
        path.unlink()
    return torn


def is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def stack_locks(lock_dir: Path) -> list[StackLock]:
    if not lock_dir.is_dir():
        return []
    return [StackLock.read(path) for path in sorted(lock_dir.glob("*.json"))]


def lock_message(lock: StackLock, state: LockState, action: str, stack: str) -> str:
    """One line: what the lock is and what this command does about it."""
    cancel = f"`pulumi cancel --stack {stack}`"
    if state is LockState.STALE:
        if action == "preview":
            return (
                f"stack {stack} carries the lock of a pulumi command that is no longer running "
                f"({lock.holder}): the next `make up` or `make destroy` removes it"
            )
        return (
            f"stack {stack} was left locked by a pulumi command that is no longer running "
            f"({lock.holder}; killed or crashed): removing its lock and going on"
        )
    if state is LockState.LIVE:
        if action == "preview":
            return (
                f"a pulumi command on stack {stack} is still running ({lock.holder}): this "
                "preview compares with the state from before it"
            )
        return (
            f"stack {stack} is locked by a pulumi command that is still running "
            f"({lock.holder}): wait for it to finish and run this again (if pid {lock.pid} "
            f"is not a pulumi command, run {cancel} first)"
        )
    if state is LockState.ELSEWHERE:
        if action == "preview":
            return (
                f"stack {stack} is locked from another machine ({lock.holder}): this preview "
                "compares with the state from before that command"
            )
        return (
            f"stack {stack} is locked from another machine ({lock.holder}): wait for that "
            f"command to finish; if nothing runs there any more, run {cancel} and run this again"
        )
    return (
        f"stack {stack} has a lock file this script cannot read ({lock.path}): if no pulumi "
        f"command runs on the stack, run {cancel} and run this again"
    )


def handle_locks(locks: Sequence[StackLock], action: str, stack: str, hostname: str) -> None:
    """Remove the stale locks (not for a preview, which takes no lock and changes nothing);
    raise StackError for one that blocks."""
    blocking: list[str] = []
    for lock in locks:
        state = lock_state(lock, hostname=hostname)
        message = lock_message(lock, state, action, stack)
        if action == "preview":
            note(message)
        elif state is LockState.STALE:
            note(message)
            lock.remove()
        else:
            blocking.append(message)
    if blocking:
        raise StackError(blocking[0])


# -- pending operations -------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingOperation:
    """One resource operation an interrupted command left unfinished (`pending_operations` in
    `pulumi stack export`)."""

    kind: str  # creating, updating, deleting, reading, importing
    urn: str
    type: str
    parent: str
    provider: str
    inputs: dict[str, Any]
    retained: bool

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]

    @classmethod
    def from_export(cls, entry: dict[str, Any]) -> PendingOperation:
        resource = entry.get("resource") or {}
        return cls(
            kind=str(entry.get("type", "")),
            urn=str(resource.get("urn", "")),
            type=str(resource.get("type", "")),
            parent=str(resource.get("parent", "")),
            provider=str(resource.get("provider", "")),
            inputs=resource.get("inputs") or {},
            retained=bool(resource.get("retainOnDelete", False)),
        )

    def kubernetes_id(self) -> str | None:
        """The provider's ID of the object the create was making (`namespace/name`)."""
        if not self.type.startswith(KUBERNETES_PREFIX) or self.type.startswith(
            "kubernetes:pulumi:"  # the provider itself, not an object
        ):
            return None
        metadata = self.inputs.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            return None
        namespace = metadata.get("namespace")
        return f"{namespace}/{metadata['name']}" if isinstance(namespace, str) else metadata["name"]


def pending_operations(export: str) -> list[PendingOperation]:
    """The pending operations of `pulumi stack export` output (none for an empty stack)."""
    if not export.strip():
        return []
    deployment = json.loads(export).get("deployment") or {}
    return [PendingOperation.from_export(op) for op in deployment.get("pending_operations") or []]


def to_import(pending: Sequence[PendingOperation]) -> list[PendingOperation]:
    """The creates `destroy` must import to delete: Kubernetes objects, not retained claims."""
    return [
        op
        for op in pending
        if op.kind == "creating" and not op.retained and op.kubernetes_id() is not None
    ]


def import_file(op: PendingOperation) -> dict[str, Any]:
    """`pulumi import --file` for one pending create: same name, parent and provider, so the
    imported resource takes the URN the create would have given it."""
    resource: dict[str, Any] = {"type": op.type, "name": op.name, "id": op.kubernetes_id()}
    names: dict[str, str] = {}
    if op.parent:
        names["parent"] = op.parent
        resource["parent"] = "parent"
    if op.provider:
        # A provider reference is `<provider URN>::<provider ID>`.
        names["provider"] = op.provider.rsplit("::", 1)[0]
        resource["provider"] = "provider"
    return {"nameTable": names, "resources": [resource]}


def pending_message(pending: Sequence[PendingOperation], action: str, stack: str) -> str:
    listed = ", ".join(f"{op.kind} {op.name}" for op in pending)
    head = (
        f"the last command on stack {stack} stopped with {len(pending)} operation(s) "
        f"unfinished ({listed})"
    )
    if action == "preview":
        return f"{head}: the next `make up` resolves them first (this preview shows them again)"
    if action == "up":
        return (
            f"{head}: refreshing the state from the cluster and clearing them first; the update "
            "then applies them again, adopting objects that already exist (nothing is made twice)"
        )
    return (
        f"{head}: importing the objects it was creating and refreshing the state first, so "
        "destroy removes them too (a retained claim is only forgotten, as always)"
    )


# -- running the CLI ----------------------------------------------------------------------------


def note(message: str) -> None:
    print(PREFIX + message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Cli:
    """The `pulumi` on PATH, on one stack."""

    stack: str
    executable: str = "pulumi"

    def capture(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.executable, *args], capture_output=True, text=True, check=False)

    def backend_url(self) -> str:
        url = os.environ.get("PULUMI_BACKEND_URL")
        if url:
            return url
        whoami = self.capture("whoami", "--json")
        if whoami.returncode != 0:
            return ""
        with contextlib.suppress(ValueError, AttributeError):
            return str(json.loads(whoami.stdout).get("url", ""))
        return ""

    def export(self) -> str:
        done = self.capture("stack", "export", "--stack", self.stack)
        if done.returncode != 0:
            raise StackError(
                f"cannot read the state of stack {self.stack} (`pulumi stack export`): "
                + (done.stderr.strip().splitlines() or ["no output"])[-1]
            )
        return done.stdout


def resolve_pending(cli: Cli, pending: Sequence[PendingOperation], action: str) -> None:
    if action == "destroy":
        for op in to_import(pending):
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as spec:
                json.dump(import_file(op), spec)
            try:
                done = cli.capture(
                    "import",
                    "--stack",
                    cli.stack,
                    "--file",
                    spec.name,
                    "--yes",
                    "--skip-preview",
                    "--protect=false",
                    "--generate-code=false",
                )
            finally:
                Path(spec.name).unlink()
            output = done.stdout + done.stderr
            if done.returncode != 0 and "does not exist" not in output:
                raise StackError(
                    f"could not import {op.name} ({op.kubernetes_id()}) to destroy it: "
                    + last_error_line(output)
                )
    refresh = [cli.executable, "refresh", "--stack", cli.stack, "--yes", "--skip-preview"]
    returncode, errors = run_logged([*refresh, "--clear-pending-creates"])
    if returncode != 0:
        why = explain(action, cli.stack, returncode, errors) or "its error is above"
        raise StackError(f"refreshing stack {cli.stack} before {action} failed: {why}")


def last_error_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if "error" in line.lower()]
    return (lines or [line.strip() for line in output.splitlines() if line.strip()] or ["?"])[-1]


def open_stack(cli: Cli, project: str, backend: Path | None) -> None:
    """Make the stack readable again where a killed command left it unreadable (`backend`: the
    file backend's directory, None for another backend), then select it (creating it the first
    time): every later command names it."""
    if backend is not None:
        for path in remove_torn_metadata(stack_state_dir(backend, project), cli.stack):
            note(
                f"stack {cli.stack}: removed {path}, the empty metadata file a killed pulumi "
                "command left beside the stack's state (the state itself is whole)"
            )
    done = cli.capture("stack", "select", "--create", cli.stack)
    if done.returncode != 0:
        raise StackError(f"cannot select stack {cli.stack}: {last_error_line(done.stderr)}")


def prepare(cli: Cli, action: str, project: str, hostname: str, backend: Path | None) -> None:
    """Everything before the command itself: locks (`backend` as open_stack's), then pending
    operations."""
    if backend is not None:
        locks = stack_locks(stack_lock_dir(backend, project, cli.stack))
        handle_locks(locks, action, cli.stack, hostname)
    try:
        pending = pending_operations(cli.export())
    except (ValueError, AttributeError) as error:
        raise StackError(
            f"`pulumi stack export --stack {cli.stack}` did not print a deployment: {error}"
        ) from error
    if not pending:
        return
    note(pending_message(pending, action, cli.stack))
    if action != "preview":
        resolve_pending(cli, pending, action)


# -- the Docker-compatible engine of a stack that builds -----------------------------------------

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
NO_ENGINE = re.compile(
    r"failed to connect to any docker daemon|Cannot connect to the Docker daemon", re.IGNORECASE
)


def no_engine_message(stack: str, host: str | None) -> str:
    where = f"at {host}" if host else f"at {DEFAULT_DOCKER_HOST} (DOCKER_HOST is not set)"
    return (
        f"stack {stack} builds its image (image.build: true) and no Docker-compatible engine "
        f"answers {where}: start Docker Engine, or set DOCKER_HOST to one (`make cluster` serves "
        "podman's at unix://<clone>/.cluster/podman.sock; `make up STACK=local` uses it)"
    )


def stack_builds(stack: str) -> bool:
    """The stack file says `image.build: true` (False when the settings cannot be read here: a
    python3 without the project's packages, or a bad setting, which the program reports)."""
    try:
        from settings.stack import SettingsError, load_stack_file
    except ImportError:
        return False
    try:
        return load_stack_file(stack, Path.cwd()).image.build
    except SettingsError:
        return False


def require_engine(stack: str) -> None:
    """Before preview and up: the Docker provider connects to the engine as it starts, also for
    a preview, and fails with "failed to connect to any docker daemon" without one."""
    host = os.environ.get("DOCKER_HOST") or None
    if stack_builds(stack) and not engine_answers(host or DEFAULT_DOCKER_HOST):
        raise StackError(no_engine_message(stack, host), 2)


# -- after a failure: one line ------------------------------------------------------------------

UNREACHABLE = re.compile(
    r"connection refused|no route to host|i/o timeout|connection reset|no such host|"
    r"network is unreachable|TLS handshake timeout|\bEOF\b|unreachable|context deadline exceeded|"
    r"Client\.Timeout",
    re.IGNORECASE,
)
URL = re.compile(r"https?://[^/\s\"']+")
# A transfer cut off midway (the registry restarted or a proxy dropped the connection), as opposed
# to a registry that is not there: once it answers again, pushing again goes through.
BROKEN_OFF = re.compile(
    r"use of closed network connection|connection reset|broken pipe|unexpected EOF|\bEOF\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Failure:
    """An error the engine reported: its message and the resource type it concerns."""

    message: str
    resource_type: str


def failures(event_log: Path) -> list[Failure]:
    """The error diagnostics of an `--event-log` file (resource type from the URN)."""
    found: list[Failure] = []
    with contextlib.suppress(OSError):
        for line in event_log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                diagnostic = json.loads(line).get("diagnosticEvent")
                if diagnostic and diagnostic.get("severity") == "error":
                    urn = str(diagnostic.get("urn") or "")
                    resource_type = urn.rsplit("::", 2)[-2].rsplit("$", 1)[-1] if urn else ""
                    found.append(Failure(str(diagnostic.get("message", "")), resource_type))
    return found


def is_docker(error: Failure) -> bool:
    """A resource of the Docker package, or its provider (`pulumi:providers:docker`)."""
    return "docker" in error.resource_type.split(":")[:3]


def registry_address(errors: Sequence[Failure]) -> str:
    """host[:port] of the first URL the errors name ("" if none does)."""
    url = next((m.group(0) for e in errors if (m := URL.search(e.message))), "")
    return url.split("//", 1)[-1]


def broken_off_push(errors: Sequence[Failure]) -> str | None:
    """The registry (host[:port]) whose push broke off midway, when that is all that failed."""
    if not errors or not all(is_docker(e) and BROKEN_OFF.search(e.message) for e in errors):
        return None
    if any(re.search(r"connection refused|no such host", e.message, re.I) for e in errors):
        return None
    return registry_address(errors) or None


def answers(address: str, timeout: float = 5.0) -> bool:
    """Whether something accepts connections at host[:port] (port 443 when none is given)."""
    host, _, port = address.rpartition(":") if ":" in address else (address, "", "443")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def explain(action: str, stack: str, returncode: int, errors: Sequence[Failure]) -> str | None:
    """What went wrong, in one line, and what the next command does about it; None for a
    failure of no known kind, whose own error (a policy violation, a bad setting) says it."""
    again = f"`make {action} STACK={stack}`"
    if action == "preview":
        done, resumes, pushes = "nothing was changed", f"run {again} again", f"run {again} again"
    else:
        done = "what was done is recorded in the state"
        resumes, pushes = f"{again} goes on from there", f"{again} pushes again and goes on"
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return (
            f"pulumi was stopped by {name}: {done}; {again} clears the lock and the unfinished "
            "operations it leaves and goes on"
        )
    text = "\n".join(error.message for error in errors)
    if NO_ENGINE.search(text):
        return no_engine_message(stack, os.environ.get("DOCKER_HOST") or None)
    # A resource of the package, or its provider (`pulumi:providers:kubernetes`).
    docker = [e for e in errors if is_docker(e)]
    kubernetes = [
        e for e in errors if "kubernetes" in e.resource_type.split(":")[:3] or not e.resource_type
    ]
    # First: a Ctrl-C cancels the requests in flight, and what they then report (a closed
    # stream, an EOF) would otherwise read like an unreachable server.
    if re.search(r"\bcancel(l)?ed\b", text, re.IGNORECASE):
        return f"the command was interrupted: {done}; {resumes}"
    broken_off = broken_off_push(docker)
    if broken_off is not None and answers(broken_off):
        return (
            f"the connection to the registry {broken_off} broke off during the push: "
            f"{done}; {pushes}"
        )
    if any(UNREACHABLE.search(e.message) for e in docker) or broken_off is not None:
        where = registry_address(docker)
        target = f"the registry {where}" if where else "the image registry"
        return (
            f"{target} could not be reached while the image was built or pushed: {done}; "
            f"once it answers, {pushes}"
        )
    if any(UNREACHABLE.search(e.message) for e in kubernetes):
        where = next((m.group(0) for e in kubernetes if (m := URL.search(e.message))), "")
        server = f"the Kubernetes API server {where}" if where else "the Kubernetes API server"
        adopted = (
            "" if action == "preview" else " (objects made meanwhile are adopted, not made twice)"
        )
        return f"{server} could not be reached: {done}; once it answers, {resumes}{adopted}"
    if action != "preview" and re.search(r"timed out|timeout", text, re.IGNORECASE):
        return (
            "a resource did not become ready in time (for the job: is the training operator "
            f"running, do its pods schedule?): {done}; {again} waits for it again"
        )
    return None


# -- the command --------------------------------------------------------------------------------


def event_log_path(argv: Sequence[str]) -> Path | None:
    for index, arg in enumerate(argv):
        if arg == EVENT_LOG_FLAG and index + 1 < len(argv):
            return Path(argv[index + 1])
        if arg.startswith(EVENT_LOG_FLAG + "="):
            return Path(arg.split("=", 1)[1])
    return None


def event_log_environment() -> dict[str, str]:
    """The CLI's environment with what `--event-log` needs: pulumi 3.260 hides the flag unless
    PULUMI_DEBUG_COMMANDS is true ("unknown flag: --event-log" otherwise), and the Automation API
    sets it for the CLI it runs in the same way. Set for the child only: a user sets nothing."""
    return {**os.environ, "PULUMI_DEBUG_COMMANDS": "true"}


@contextlib.contextmanager
def forwarded_signals(child: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGQUIT reach pulumi as if this process were it (the script used to
    exec it). SIGINT is not forwarded: Ctrl-C reaches pulumi from the terminal already, and a
    second one would make it abandon its clean cancel."""

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    forwarded = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    previous = {signum: signal.signal(signum, forward) for signum in forwarded}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_logged(argv: Sequence[str], event_log: Path | None = None) -> tuple[int, list[Failure]]:
    """Run the CLI (signals forwarded) with an event log: `event_log`, the one argv names, or one
    of its own; its exit status (negative: killed by that signal) and the errors the engine
    reported."""
    argv = list(argv)
    own_log = None
    if event_log is not None and event_log_path(argv) is None:
        argv += [EVENT_LOG_FLAG, str(event_log)]
    event_log = event_log_path(argv)
    if event_log is None:
        handle, name = tempfile.mkstemp(prefix="pulumi-events-", suffix=".jsonl")
        os.close(handle)
        own_log = event_log = Path(name)
        argv += [EVENT_LOG_FLAG, name]
    try:
        child = subprocess.Popen(argv, env=event_log_environment())
        with forwarded_signals(child):
            returncode = child.wait()
        return returncode, failures(event_log) if returncode != 0 else []
    finally:
        if own_log is not None:
            own_log.unlink(missing_ok=True)


def run_command(action: str, stack: str, argv: Sequence[str], event_log: Path | None = None) -> int:
    """Run the CLI; after a failure print one line on why and what the next command does.

    An `up` whose only failure is a push that broke off midway (the registry restarted, a proxy
    dropped the connection: podman then reports "use of closed network connection") runs once
    more if the registry answers by then: the build is cached and the push starts over, which
    is what the user would do next anyway."""
    returncode, errors = run_logged(argv, event_log)
    registry = broken_off_push(errors) if action == "up" and returncode > 0 else None
    if registry is not None and answers(registry):
        note(f"the push to the registry {registry} broke off midway; it answers: pushing again")
        returncode, errors = run_logged(argv, event_log)
    explanation = explain(action, stack, returncode, errors) if returncode != 0 else None
    if explanation is not None:
        note(explanation)
    return 128 - returncode if returncode < 0 else returncode


def project_name(project_file: Path) -> str:
    """`name:` of Pulumi.yaml (a top-level scalar: no YAML parser needed for it)."""
    match = re.search(r"^name:\s*['\"]?([^'\"\s#]+)", project_file.read_text(), re.MULTILINE)
    if match is None:
        raise StackError(f"{project_file} has no `name:`")
    return match.group(1)


def sync_secret(cli: Cli, key: str, source: Path) -> None:
    """The stack's secret `key` from the file `source`, set (through stdin, never the command
    line) when it is missing or differs: the stack file changes only when the value does."""
    try:
        value = source.read_text().strip()
    except OSError as error:
        raise StackError(f"cannot read {source} for {key}: {error.strerror}") from None
    current = cli.capture("config", "get", "--stack", cli.stack, key)
    if current.returncode == 0 and current.stdout.rstrip("\n") == value:
        return
    done = subprocess.run(
        [cli.executable, "config", "set", "--stack", cli.stack, "--secret", key],
        input=value,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        why = last_error_line(done.stderr)
        raise StackError(f"could not set {key} on stack {cli.stack}: {why}")
    note(f"stack {cli.stack}: secret {key} set from {source}")


@dataclass(frozen=True)
class Options:
    action: str
    stack: str
    command: list[str]
    event_log: Path | None = None
    registry_password_file: Path | None = None


USAGE = (
    "usage: python3 -m tools.pulumi_run ACTION STACK [--event-log FILE] "
    "[--registry-password-file FILE] -- PULUMI_ARGV..."
)


def parse(args: Sequence[str]) -> Options | None:
    """ACTION STACK [options] -- PULUMI_ARGV; None when it is not that."""
    if "--" not in args:
        return None
    split = list(args).index("--")
    head, command = list(args[:split]), list(args[split + 1 :])
    if len(head) < 2 or head[0] not in ACTIONS or not command:
        return None
    options: dict[str, Path] = {}
    rest = head[2:]
    while rest:
        if len(rest) < 2 or rest[0] not in ("--event-log", "--registry-password-file"):
            return None
        options[rest[0].removeprefix("--").replace("-", "_")] = Path(rest[1])
        rest = rest[2:]
    return Options(head[0], head[1], command, **options)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    if options is None:
        print(USAGE, file=sys.stderr)
        return 2
    cli = Cli(options.stack, options.command[0])
    try:
        project = project_name(Path("Pulumi.yaml"))
        # Asked once: without PULUMI_BACKEND_URL, `pulumi whoami` says which backend it is.
        backend = file_backend_dir(cli.backend_url())
        open_stack(cli, project, backend)
        if options.action == "config":
            # Its stdin is the user's: `set --secret KEY` reads the value there, never argv.
            returncode = subprocess.run(options.command, check=False).returncode
            return 128 - returncode if returncode < 0 else returncode
        if options.action != "destroy":
            require_engine(options.stack)
        if options.registry_password_file is not None:
            sync_secret(cli, f"{project}:registryPassword", options.registry_password_file)
        prepare(cli, options.action, project, socket.gethostname(), backend)
    except StackError as error:
        note(str(error))
        return error.exit_code
    return run_command(options.action, options.stack, options.command, options.event_log)


if __name__ == "__main__":
    sys.exit(main())
