"""Copy a stack's checkpoints from its claim to this machine (the tutorial's step 8), whether the
job runs, has finished, or the stack was destroyed with the claim retained.

    python -m tools.retrieve --stack prod [--out DIR] [--all | --epoch N] [--image IMAGE]

Why a pod of its own: `kubectl exec` into the master works only while it runs, and once the job
has finished (or `cleanPodPolicy`, `ttlSecondsAfterFinished` or `pulumi destroy` removed it)
nothing mounts the claim. So this starts a short-lived pod that mounts the claim read-only, with
the job's image and pull secret while they exist (or `--image`, any image with `tar`), prints
what `python -m trainer.checkpoint` says of the job's directory, copies the newest committed
checkpoint (or all of them, or epoch N's) with `manifest.json`, `metrics.jsonl` and the
TensorBoard event files (`tensorboard/`, which `make tensorboard` opens) to `--out`, checks each
copied checkpoint's sha256 against the manifest, and deletes the pod: always, also
on Ctrl-C, SIGTERM or an error (and the pod's own deadline ends it should this process be
killed first). A ReadWriteOnce claim that a running pod has mounted is read from that pod's
node, the only one where it can be mounted too.

The reader pod is as restricted as the job's pods and runs as the job's user and groups
(`job.securityContext`, builders/manifests.py): it reads what the trainer wrote (files
readable by all, in directories of the claim's fsGroup). A claim written by someone else (an
older run as root, another image's user) must be readable by that user: when it is not, the tool
says so in one line with the file it could not read and what to set.

A stack with `checkpoints.storage: s3` needs no pod: the bucket answers this machine as it
answers the pods, so the copy is made here through the trainer's storage backend, with the
stack's endpoint and region (unless AWS_ENDPOINT_URL_S3 and AWS_DEFAULT_REGION say otherwise
here) and this environment's credentials, and verified the same way.

A `job.command` of your own writes what it likes to the job's directory (`CHECKPOINT_DIR`):
with the trainer's `manifest.json` there, the copy is the trainer's and verified; without one,
the directory is copied whole, as it is, and the tool says so (nothing tells which file is a
checkpoint, or whether it is whole). The job's image is then yours (`ls` and `tar` are all the
reader runs in it).

Exit codes: 0 copied (and verified, where the manifest is); 1 the copy failed or does not match
the manifest; 2 the stack, the claim or a flag is wrong (nothing was created); 130/143
interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import secrets
import shlex
import shutil
import signal
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from builders.job_apis import api_of_settings
from builders.manifests import (
    checkpoint_reader_pod_manifest,
    resource_names,
)
from readers.job_state import START_FAILURES, pod_refusal
from readers.job_watch import JobWatchError, api_client, api_error_reason, describe_api_error
from settings.stack import REPO_ROOT, SettingsError, StackSettings, load_stack_file
from tools.stack_cli import add_stack_arguments

if TYPE_CHECKING:  # the trainer imports torch: only when a manifest is read
    from trainer.checkpoint import CheckpointEntry
    from trainer.storage import RunStorage

# Long enough for a large checkpoint to stream; the pod ends by itself after it regardless.
DEADLINE_SECONDS = 3600
START_TIMEOUT_S = 300.0


class RetrieveError(Exception):
    """A one-line reason; `exit_code` 2 when the input is wrong and nothing was created."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Reader:
    """How the reader pod is made: with which image and pull secret, on which node."""

    image: str
    pull_secret: str | None
    node: str | None
    trainer_image: bool  # the job's own trainer image, which has `python -m trainer.checkpoint`


class Cluster:
    """The stack's namespace on the cluster its kubeconfig context points at."""

    def __init__(self, settings: StackSettings) -> None:
        from kubernetes import client

        try:
            api = api_client(settings.kube_context)
        except JobWatchError as error:
            raise RetrieveError(str(error), 2) from None
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = settings.namespace
        self.job_api = api_of_settings(settings)

    def read(self, reader: Any, *args: Any) -> Any | None:
        from kubernetes import client

        try:
            return reader(*args)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def claim(self, name: str) -> Any | None:
        return self.read(self.core.read_namespaced_persistent_volume_claim, name, self.namespace)

    def job(self, name: str) -> dict[str, Any] | None:
        return self.read(
            self.custom.get_namespaced_custom_object,
            self.job_api.group,
            self.job_api.version,
            self.namespace,
            self.job_api.plural,
            name,
        )

    def secret_exists(self, name: str) -> bool:
        return self.read(self.core.read_namespaced_secret, name, self.namespace) is not None

    def pods_mounting(self, claim: str) -> list[Any]:
        return [
            pod
            for pod in self.core.list_namespaced_pod(self.namespace).items
            if pod.status.phase == "Running"
            and any(
                volume.persistent_volume_claim is not None
                and volume.persistent_volume_claim.claim_name == claim
                for volume in pod.spec.volumes or []
            )
        ]


def plan_reader(settings: StackSettings, cluster: Cluster, image: str | None) -> Reader:
    """Check the claim is there and readable now, and choose the pod's image, secret and node."""
    names = resource_names(settings)
    claim = cluster.claim(names.claim)
    if claim is None:
        raise RetrieveError(
            f"no claim {names.claim} in namespace {cluster.namespace}: was the stack never "
            "brought up, or destroyed with checkpoints.retainOnDestroy: false?",
            2,
        )
    modes = set(claim.spec.access_modes or [])
    users = cluster.pods_mounting(names.claim)
    node = None
    if users and "ReadWriteMany" not in modes and "ReadOnlyMany" not in modes:
        if "ReadWriteOncePod" in modes:
            raise RetrieveError(
                f"claim {names.claim} is ReadWriteOncePod and pod {users[0].metadata.name} has it "
                "mounted: retrieve after the job ends (or stop it)",
                2,
            )
        node = users[0].spec.node_name  # ReadWriteOnce: mountable on that node only
    job = cluster.job(names.job)
    job_image = cluster.job_api.job_image(job) if job is not None else None
    if image is None and job_image is None:
        raise RetrieveError(
            f"job {names.job} is gone, and with it the image it ran: pass --image IMAGE "
            "(any image with tar; the trainer image also describes the checkpoints)",
            2,
        )
    pull_secret = names.pull_secret
    if pull_secret is not None and not cluster.secret_exists(pull_secret):
        pull_secret = None  # destroyed with the stack; a public --image needs none
    return Reader(
        image=image or job_image or "",
        pull_secret=pull_secret,
        node=node,
        # The job's own image has the trainer's inspector when the job runs the trainer.
        trainer_image=image is None and settings.job.runs_trainer,
    )


def select_entries(
    entries: Sequence[CheckpointEntry], *, epoch: int | None, every: bool
) -> list[CheckpointEntry]:
    """The newest checkpoint; with `every`, all; with `epoch`, the newest one after that many
    epochs (a mid-epoch checkpoint of the epoch after N is not epoch N's)."""
    if not entries:
        raise RetrieveError("the manifest lists no committed checkpoint yet")
    if every:
        return list(entries)
    if epoch is None:
        return [entries[-1]]
    matching = [e for e in entries if e.epochs_completed == epoch and e.step_in_epoch == 0]
    if not matching:
        available = sorted({e.epochs_completed for e in entries if e.step_in_epoch == 0})
        raise RetrieveError(
            f"--epoch = {epoch}: no committed checkpoint after epoch {epoch}; the manifest has "
            f"epochs {', '.join(map(str, available)) or 'none (only mid-epoch checkpoints)'}",
            2,
        )
    return [matching[-1]]


def drained(ws: Any) -> tuple[bytes, bytes]:
    """The stdout and stderr an exec's client holds now, without waiting. After the stream
    closes, what the last read brought in is still there: a reader that stops at `is_open()`
    loses the tail (one read can take in the last data, the Status and the close at once, which
    a loaded machine makes likely: a tar cut to "unexpected end of data")."""
    return ws.read_stdout(timeout=0) or b"", ws.read_stderr(timeout=0) or b""


class _ExecStdout(io.RawIOBase):
    """A command's stdout in a pod, read as a binary stream (what `tarfile` reads from)."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._buffer = b""
        self.stderr = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while True:
            out, err = drained(self._ws)
            self._buffer += out
            self.stderr += err
            if self._buffer or not self._ws.is_open():
                break
            self._ws.update(timeout=1)
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


class ReaderPod:
    """The reader pod, created on enter and deleted on exit, whatever happens in between."""

    def __init__(self, cluster: Cluster, settings: StackSettings, reader: Reader) -> None:
        self.cluster = cluster
        self.settings = settings
        self.name = f"{settings.job.name}-checkpoint-reader-{secrets.token_hex(3)}"
        self.node: str | None = reader.node
        self.manifest = checkpoint_reader_pod_manifest(
            settings,
            name=self.name,
            image=reader.image,
            pull_secret=reader.pull_secret,
            node=reader.node,
            deadline_seconds=DEADLINE_SECONDS,
        )

    def __enter__(self) -> ReaderPod:
        from kubernetes import client

        try:
            self.cluster.core.create_namespaced_pod(self.cluster.namespace, self.manifest)
        except client.ApiException as error:
            # Pod Security, a policy webhook or RBAC: the API server's reason, nothing created.
            raise RetrieveError(
                f"the API server refused reader pod {self.name}: {api_error_reason(error)}"
            ) from None
        try:
            self.node = self._wait_running()
        except BaseException:
            self.delete()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def delete(self) -> None:
        from kubernetes import client
        from urllib3.exceptions import HTTPError

        with contextlib.suppress(client.ApiException, HTTPError):
            self.cluster.core.delete_namespaced_pod(
                self.name, self.cluster.namespace, grace_period_seconds=0
            )

    def _wait_running(self) -> str | None:
        """The node the pod runs on, once it runs."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            pod = self.cluster.core.read_namespaced_pod(self.name, self.cluster.namespace)
            if pod.status.phase == "Running":
                return pod.spec.node_name
            if pod.status.phase in ("Failed", "Succeeded"):
                # An eviction (the node's disk or memory) or a refusal says why on the pod.
                why = ": ".join(
                    part
                    for part in pod_refusal(
                        {"reason": pod.status.reason, "message": pod.status.message}
                    )
                    if part
                )
                raise RetrieveError(
                    f"reader pod {self.name} ended ({pod.status.phase}{': ' + why if why else ''})"
                )
            for status in pod.status.container_statuses or []:
                waiting = status.state.waiting if status.state else None
                if waiting is not None and waiting.reason in START_FAILURES:
                    raise RetrieveError(
                        f"reader pod {self.name} cannot start ({status.image}): {waiting.reason}"
                        + (f": {waiting.message}" if waiting.message else "")
                    )
            time.sleep(1)
        raise RetrieveError(f"reader pod {self.name} did not start in {START_TIMEOUT_S:.0f}s")

    def _exec(self, command: list[str]) -> Any:
        """A command in the pod, through the API server and the pod's node (the kubelet serves
        exec): a node that cannot is one line, exit code 2 (kwok's fake nodes run no container;
        a kubelet the API server cannot reach, or one that refuses it)."""
        from kubernetes import client
        from kubernetes.stream import stream
        from websocket import WebSocketException

        try:
            return stream(
                client.CoreV1Api(self.cluster.api).connect_get_namespaced_pod_exec,
                self.name,
                self.cluster.namespace,
                command=command,
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
                binary=True,
                _preload_content=False,
            )
        except (client.ApiException, WebSocketException, OSError) as error:
            reason = str(getattr(error, "reason", None) or error)
            raise self._no_exec(command[0], reason) from None

    def _no_exec(self, program: str, reason: str) -> RetrieveError:
        # The API server's words name the kubelet's URL with the whole command: not needed here.
        reason = re.sub(r'(\w+) "[^"]*"', r"\1", reason.strip().splitlines()[0] if reason else "")
        return RetrieveError(
            f"cannot run {program} in reader pod {self.name} on node {self.node or '?'} "
            f"({reason}): the node does not serve exec to the API server; on a cluster whose "
            "nodes do, `make checkpoint` works as it is",
            2,
        )

    def _exit_code(self, ws: Any, program: str) -> int:
        """The exit code of a finished exec, from the Status the API server wrote on the error
        channel; a Failure without an exit code means the command never ran (the node could not
        be reached, or does not run containers), which is `_no_exec`."""
        from kubernetes.stream.ws_client import ERROR_CHANNEL

        status = yaml.safe_load(ws.read_channel(ERROR_CHANNEL) or "") or {}
        if not isinstance(status, dict) or status.get("status", "Success") == "Success":
            return 0
        causes = (status.get("details") or {}).get("causes") or []
        for cause in causes:
            if cause.get("reason") == "ExitCode":
                return int(cause.get("message", 1))
        raise self._no_exec(program, str(status.get("message") or status))

    def run(self, command: list[str]) -> tuple[int, str, str]:
        """Exit code, stdout and stderr of a command in the pod."""
        ws = self._exec(command)
        out, err = b"", b""
        while True:
            more_out, more_err = drained(ws)
            out, err = out + more_out, err + more_err
            if not ws.is_open():
                break
            ws.update(timeout=1)
        ws.close()
        code = self._exit_code(ws, command[0])
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    def copy_out(self, directory: str, files: Sequence[str], out: Path) -> None:
        """`tar` the files of `directory` in the pod into `out` here, streamed, never buffered
        whole (checkpoints run to gigabytes)."""
        ws = self._exec(["tar", "-cf", "-", "-C", directory, *files])
        stdout = _ExecStdout(ws)
        broken = None
        try:
            with tarfile.open(fileobj=io.BufferedReader(stdout), mode="r|") as archive:
                extract_data(archive, out)
        except tarfile.TarError as error:  # the exit code (or the exec's failure) says why
            broken = error
        ws.close()
        code = self._exit_code(ws, "tar")
        if code:
            said = stdout.stderr.decode(errors="replace").strip()
            raise RetrieveError(
                unreadable(self.settings, said)
                or f"tar of {directory} in {self.name} failed ({code}): {said}"
            )
        if broken is not None:
            raise RetrieveError(f"tar of {directory} in {self.name}: {broken}")


def extract_data(archive: tarfile.TarFile, out: Path) -> None:
    """Extract plain files and directories only, under `out`: tarfile's "data" filter where
    Python has it (3.11.4 and later), the same refusals by hand before (Debian bookworm's
    Python is 3.11.2, and its tarfile has no `filter`)."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(out, filter="data")
        return

    def checked() -> Iterator[tarfile.TarInfo]:
        for member in archive:
            path = PurePosixPath(member.name)
            if path.is_absolute() or ".." in path.parts or not (member.isfile() or member.isdir()):
                raise tarfile.TarError(
                    f"refusing {member.name!r}: only files and directories under the run's own "
                    "directory are copied"
                )
            yield member

    archive.extractall(out, members=checked())


def unreadable(settings: StackSettings, stderr: str) -> str | None:
    """What to do when the reader may not read the claim (`stderr` of its command says
    "Permission denied"): the files are another user's; None when that is not what happened."""
    denied = [line.strip() for line in stderr.splitlines() if "Permission denied" in line]
    if not denied:
        return None
    job = settings.job
    who = f"user {job.run_as_user}, groups {job.security_context.run_as_group} and "
    who += str(job.security_context.fs_group)
    return (
        f"the reader pod ({who}, as the job's pods: job.securityContext) may not read the "
        f"claim: {denied[-1]}; the files are another user's (a run as root before the job ran "
        "as non-root, another image's user) and not readable by all: set job.securityContext "
        "to their owner's user or group, or job.runAsRoot: true where the namespace admits root"
    )


@dataclass(frozen=True)
class Copied:
    """What `retrieve` copied: the checkpoints, each verified against the trainer's manifest, or
    (no manifest: a command of your own wrote the directory) its entries as they were."""

    paths: list[Path]
    verified: bool


class RunReader(Protocol):
    """What `copy_run` needs of the reader pod: a command's result, and a streamed copy."""

    def run(self, command: list[str]) -> tuple[int, str, str]: ...

    def copy_out(self, directory: str, files: Sequence[str], out: Path) -> None: ...


def retrieve(
    settings: StackSettings,
    out: Path,
    *,
    epoch: int | None = None,
    every: bool = False,
    image: str | None = None,
    say: Any = print,
) -> Copied:
    """Copy the run's directory from a mounted checkpoint storage (the claim) to `out` through
    a reader pod that mounts it (see `copy_run`), or, from a networked one (the bucket), straight
    to this machine (see `copy_from_storage`). An API server that cannot be reached or refuses
    is a RetrieveError (exit code 2) naming it."""
    checkpoints = settings.checkpoints
    if checkpoints.backend.mount_path(checkpoints) is None:
        with bucket_client_environment(settings):
            return copy_from_storage(
                settings.checkpoint_dir, out, epoch=epoch, every=every, say=say
            )
    from kubernetes.client import ApiException
    from urllib3.exceptions import HTTPError

    cluster = Cluster(settings)
    try:
        reader = plan_reader(settings, cluster, image)
        with ReaderPod(cluster, settings, reader) as pod:
            say(f"reader pod {pod.name} mounts claim {resource_names(settings).claim} read-only")
            return copy_run(
                pod, settings, out, epoch=epoch, every=every, describe=reader.trainer_image, say=say
            )
    except (ApiException, HTTPError) as error:
        raise RetrieveError(describe_api_error(error, cluster.api), 2) from None


def copy_run(
    pod: RunReader,
    settings: StackSettings,
    out: Path,
    *,
    epoch: int | None = None,
    every: bool = False,
    describe: bool = False,
    say: Any = print,
) -> Copied:
    """Copy the selected checkpoints, manifest and metrics of the job's directory on the claim
    (`CHECKPOINT_DIR`) to `out`, each checkpoint verified against the manifest by the trainer's
    own store; `describe`: print what the image's `python -m trainer.checkpoint` says first.
    A directory without the trainer's manifest (a `job.command` of your own wrote it) is copied
    whole, as it is, and said to be unverified: nothing tells which of its files is what."""
    from trainer.checkpoint import MANIFEST_NAME, CheckpointError, CheckpointStore
    from trainer.metrics import METRICS_NAME
    from trainer.tensorboard_log import DIRECTORY as TENSORBOARD_DIRECTORY

    directory = settings.checkpoint_dir
    code, listing, err = pod.run(["ls", "-1", "-A", "--", directory])
    names = listing.splitlines()
    if code != 0 or not names:
        nothing = (
            f"no committed checkpoint in {directory} on the claim yet"
            if settings.job.runs_trainer
            else f"nothing in {directory} on the claim yet (job.command writes $CHECKPOINT_DIR)"
        )
        raise RetrieveError(unreadable(settings, err) or nothing)
    if MANIFEST_NAME not in names:
        return _copy_unverified(pod, directory, names, out, epoch=epoch, say=say)
    if describe:
        code, described, err = pod.run(["python3", "-m", "trainer.checkpoint", directory])
        if code != 0:
            last = err.strip().splitlines()[-1] if err.strip() else "failed"
            raise RetrieveError(unreadable(settings, err) or last)
        say(described.strip())
    out.mkdir(parents=True, exist_ok=True)
    extras = [
        name for name in (MANIFEST_NAME, METRICS_NAME, TENSORBOARD_DIRECTORY) if name in names
    ]
    pod.copy_out(directory, extras, out)  # a folder (tensorboard/) with everything in it
    copies = CheckpointStore(out)
    try:
        entries = copies.manifest()
    except CheckpointError as error:
        raise RetrieveError(str(error)) from None
    chosen = select_entries(entries, epoch=epoch, every=every)
    pod.copy_out(directory, [entry.file for entry in chosen], out)
    copied = []
    for entry in chosen:
        try:
            copies.verify(entry)
        except CheckpointError as error:
            raise RetrieveError(str(error)) from None
        where = copies.storage.location_of(entry.file)
        say(f"{where}: epoch {entry.epochs_completed}, sha256 {entry.sha256} verified")
        copied.append(out / entry.file)
    return Copied(copied, verified=True)


@contextlib.contextmanager
def bucket_client_environment(settings: StackSettings) -> Iterator[None]:
    """The networked storage's plain environment (s3: the stack's endpoint and region) for this
    process's client, where this environment does not name its own (an endpoint the pods reach
    by a name this machine does not resolve, such as a Service's, is overridden by exporting
    AWS_ENDPOINT_URL_S3). The credentials are this environment's: the stack's are secrets the
    cluster holds."""
    added = {
        name: value
        for name, value in settings.checkpoints.client_environment.items()
        if not os.environ.get(name)
    }
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def copy_from_storage(
    root: str,
    out: Path,
    *,
    epoch: int | None = None,
    every: bool = False,
    say: Any = print,
) -> Copied:
    """Copy the selected checkpoints, manifest, metrics and TensorBoard event files of a run
    kept in object storage (``checkpoints.storage: s3``) to `out`, straight from this machine
    through the trainer's own storage backend (no pod: the bucket answers here, with this
    machine's credentials), each checkpoint verified against the manifest as `copy_run` does; a
    sharded one (FSDP) is its folder with every file the manifest lists."""
    from trainer.checkpoint import MANIFEST_NAME, CheckpointError, CheckpointStore
    from trainer.metrics import METRICS_NAME
    from trainer.storage import open_storage

    storage = open_storage(root)
    try:
        problem = storage.unusable()
        if problem is not None:
            raise RetrieveError(f"{root} {problem}", 2)
        if not storage.exists(MANIFEST_NAME):
            raise RetrieveError(f"no committed checkpoint in {root} yet (no {MANIFEST_NAME})")
        # The newest that verifies (a sharded one's every file), without loading its weights.
        found = CheckpointStore(storage).find_resumable()
        if found is None:
            raise RetrieveError(f"no checkpoint in {root} verifies against its manifest")
        say(
            f"{root}: newest verified checkpoint {found.location} (epoch "
            f"{found.checkpoint.epochs_run}, step {found.entry.step_in_epoch})"
        )
        out.mkdir(parents=True, exist_ok=True)
        for name in (MANIFEST_NAME, METRICS_NAME):
            if storage.exists(name):
                (out / name).write_bytes(storage.read_bytes(name))
        copy_event_files(storage, out, say)
        copies = CheckpointStore(out)
        chosen = select_entries(copies.manifest(), epoch=epoch, every=every)
        copied = []
        for entry in chosen:
            # A sharded checkpoint (FSDP) is a folder of objects, each listed in the manifest.
            names = (
                [entry.file] if entry.files is None else [f"{entry.file}/{f}" for f in entry.files]
            )
            for name in names:
                copy = out / name
                copy.parent.mkdir(parents=True, exist_ok=True)
                with (
                    storage.local_file(name) as downloaded,
                    downloaded.open("rb") as source,
                    copy.open("wb") as target,
                ):
                    shutil.copyfileobj(source, target, 16 << 20)
            copies.verify(entry)
            say(
                f"{storage.location_of(entry.file)}: epoch {entry.epochs_completed}, sha256 "
                f"{entry.sha256} verified"
            )
            copied.append(out / entry.file)
    except CheckpointError as error:
        raise RetrieveError(str(error)) from None
    except OSError as error:
        raise RetrieveError(f"{root}: {error}", 2) from None
    return Copied(copied, verified=True)


def copy_event_files(storage: RunStorage, out: Path, say: Any) -> list[Path]:
    """The run's TensorBoard event files (``tensorboard/`` in its root) into `out/tensorboard`.
    A run's storage names its objects but does not list them (the trainer never needs to), so
    a bucket is listed here, with the backend's own client. The checkpoints matter more: when
    the files cannot be copied the retrieval goes on and says so."""
    from trainer.storage import s3
    from trainer.tensorboard_log import DIRECTORY

    if not isinstance(storage, s3.S3Storage):
        return []
    folder = f"{storage.prefix}/{DIRECTORY}/" if storage.prefix else f"{DIRECTORY}/"
    copied = []
    try:
        with s3._as_os_errors(storage.location_of(DIRECTORY)):
            pages = (
                s3._client()
                .get_paginator("list_objects_v2")
                .paginate(Bucket=storage.bucket, Prefix=folder)
            )
            keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        for key in keys:
            relative = PurePosixPath(key.removeprefix(folder))
            if key.endswith("/") or ".." in relative.parts or not relative.parts:
                continue  # a folder's marker, or no file of the folder (a key may say anything)
            name = f"{DIRECTORY}/{relative}"
            copy = out / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(storage.read_bytes(name))
            copied.append(copy)
    except OSError as error:
        say(f"{storage.location_of(DIRECTORY)}: TensorBoard event files not copied: {error}")
        return copied
    if copied:
        say(f"{storage.location_of(DIRECTORY)}: {len(copied)} TensorBoard event file(s) copied")
    return copied


def _copy_unverified(
    pod: RunReader,
    directory: str,
    names: list[str],
    out: Path,
    *,
    epoch: int | None,
    say: Any,
) -> Copied:
    """Everything in `directory`, as it is: what a command of your own wrote there."""
    from trainer.checkpoint import MANIFEST_NAME

    if epoch is not None:
        raise RetrieveError(
            f"--epoch = {epoch}: {directory} has no {MANIFEST_NAME}, the trainer's list of "
            "checkpoints by epoch (job.command wrote it): leave --epoch out to copy all of it",
            2,
        )
    out.mkdir(parents=True, exist_ok=True)
    pod.copy_out(directory, names, out)
    say(
        f"{directory} has no {MANIFEST_NAME} (the trainer's, against which each checkpoint is "
        f"verified): copied its {len(names)} entr{'y' if len(names) == 1 else 'ies'} as they "
        f"are, unverified: {', '.join(names)}"
    )
    return Copied([out / name for name in names], verified=False)


class Terminated(BaseException):
    """SIGTERM: like Ctrl-C, it unwinds through the reader pod's deletion."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    def interrupt(_signum: int, _frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.retrieve",
        description="Copy a stack's checkpoints from its claim, through a short-lived pod (or "
        "from its bucket, for checkpoints in object storage).",
    )
    add_stack_arguments(parser)
    parser.add_argument(
        "--out", type=Path, help="where the copies go (default: .checkpoints/<stack>-retrieved)"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every committed checkpoint")
    which.add_argument("--epoch", type=int, help="the checkpoint after epoch N")
    parser.add_argument(
        "--image",
        help="the reader pod's image when the job (and its image) is gone: any image with tar",
    )
    args = parser.parse_args(argv)
    out = args.out or REPO_ROOT / ".checkpoints" / f"{args.stack}-retrieved"
    try:
        settings = load_stack_file(args.stack, args.stack_dir)
        with sigterm_as_interrupt():
            copied = retrieve(settings, out, epoch=args.epoch, every=args.all, image=args.image)
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    except RetrieveError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except (KeyboardInterrupt, Terminated) as stop:
        print("interrupted: the reader pod was deleted", file=sys.stderr)
        return 143 if isinstance(stop, Terminated) else 130
    if copied.verified:
        plot = f"python -m trainer.plot {shlex.quote(str(out))} draws the loss curve"
        if (out / "tensorboard").is_dir():
            plot += f", make tensorboard LOGDIR={shlex.quote(str(out))} opens its event files"
        print(f"copied to {out}: {plot}")
    else:
        print(f"copied to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
