"""tools/retrieve.py (`make checkpoint`): which checkpoints it copies, how it plans the reader pod,
and its one-line errors. The copy itself, through a real pod on a real node, is in the real-engine
suite (tests/e2e/test_real_node.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from builders.job_apis.pytorchjob import API as PYTORCHJOB
from settings.stack import TRAINER_GID, TRAINER_UID, parse_settings
from tests.conftest import REPO_ROOT
from tools.retrieve import (
    Reader,
    ReaderPod,
    RetrieveError,
    _ExecStdout,
    extract_data,
    plan_reader,
    select_entries,
    unreadable,
)
from trainer.checkpoint import CheckpointEntry
from trainer.storage import s3

IMAGE = "registry.example.com/ml/trainer@sha256:" + "a" * 64


def entry(epochs: int, step: int = 0) -> CheckpointEntry:
    return CheckpointEntry(
        file=f"checkpoint-e{epochs:06d}-s{step:06d}.pt",
        sha256="0" * 64,
        size=1,
        epochs_completed=epochs,
        step_in_epoch=step,
        world_size=2,
        fingerprint="f",
    )


ENTRIES = [entry(2), entry(4), entry(4, 17), entry(6)]


def test_the_newest_checkpoint_by_default_all_or_one_epochs() -> None:
    assert select_entries(ENTRIES, epoch=None, every=False) == [entry(6)]
    assert select_entries(ENTRIES, epoch=None, every=True) == ENTRIES
    # Epoch 4's checkpoint is the one written when epoch 4 ended, not one in the middle of 5.
    assert select_entries(ENTRIES, epoch=4, every=False) == [entry(4)]


def test_an_epoch_without_a_checkpoint_names_the_ones_there() -> None:
    with pytest.raises(RetrieveError) as raised:
        select_entries(ENTRIES, epoch=3, every=False)
    assert str(raised.value) == (
        "--epoch = 3: no committed checkpoint after epoch 3; the manifest has epochs 2, 4, 6"
    )
    assert raised.value.exit_code == 2
    with pytest.raises(RetrieveError, match="no committed checkpoint yet"):
        select_entries([], epoch=None, every=False)


def pod(name: str, node: str, claim: str) -> Any:
    volume = SimpleNamespace(persistent_volume_claim=SimpleNamespace(claim_name=claim))
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name),
        spec=SimpleNamespace(node_name=node, volumes=[volume]),
        status=SimpleNamespace(phase="Running"),
    )


@dataclass
class ClusterState:
    """What plan_reader asks of the cluster, set up per test."""

    access_modes: list[str] | None = field(default_factory=lambda: ["ReadWriteMany"])
    mounted_by: list[Any] = field(default_factory=list)
    job_image: str | None = IMAGE
    secrets: set[str] = field(default_factory=set)
    namespace: str = "default"
    job_api: Any = PYTORCHJOB

    def claim(self, name: str) -> Any | None:
        if self.access_modes is None:
            return None
        return SimpleNamespace(spec=SimpleNamespace(access_modes=self.access_modes))

    def pods_mounting(self, claim: str) -> list[Any]:
        return self.mounted_by

    def job(self, name: str) -> dict[str, Any] | None:
        if self.job_image is None:
            return None
        container = {"name": "pytorch", "image": self.job_image}
        template = {"template": {"spec": {"containers": [container]}}}
        return {"spec": {"pytorchReplicaSpecs": {"Master": template}}}

    def secret_exists(self, name: str) -> bool:
        return name in self.secrets


SETTINGS = parse_settings(
    {
        "image": {"build": False, "ref": IMAGE},
        "registry": {"server": "registry.example.com", "username": "robot"},
        "job": {"name": "run-a"},
    },
    password="pw",
)


def test_while_the_job_exists_its_image_and_pull_secret_read_the_claim() -> None:
    cluster = ClusterState(secrets={"run-a-registry"})
    reader = plan_reader(SETTINGS, cluster, None)  # type: ignore[arg-type]
    assert (reader.image, reader.pull_secret, reader.node, reader.trainer_image) == (
        IMAGE,
        "run-a-registry",
        None,
        True,
    )


def test_once_the_job_is_gone_an_image_must_be_named() -> None:
    cluster = ClusterState(job_image=None)
    with pytest.raises(RetrieveError) as raised:
        plan_reader(SETTINGS, cluster, None)  # type: ignore[arg-type]
    assert "pass --image IMAGE" in str(raised.value) and raised.value.exit_code == 2
    reader = plan_reader(SETTINGS, cluster, "busybox:1.36")  # type: ignore[arg-type]
    # The stack's secret went with `pulumi destroy`: the named image is pulled without it.
    assert (reader.image, reader.pull_secret, reader.trainer_image) == (
        "busybox:1.36",
        None,
        False,
    )


def test_a_missing_claim_is_a_one_line_error() -> None:
    with pytest.raises(RetrieveError) as raised:
        plan_reader(SETTINGS, ClusterState(access_modes=None), None)  # type: ignore[arg-type]
    assert str(raised.value).startswith("no claim run-a-checkpoints in namespace default")
    assert raised.value.exit_code == 2


def test_a_read_write_once_claim_in_use_is_read_on_its_node() -> None:
    cluster = ClusterState(
        access_modes=["ReadWriteOnce"], mounted_by=[pod("run-a-master-0", "node-3", "x")]
    )
    assert plan_reader(SETTINGS, cluster, None).node == "node-3"  # type: ignore[arg-type]
    cluster.access_modes = ["ReadWriteMany"]
    assert plan_reader(SETTINGS, cluster, None).node is None  # type: ignore[arg-type]
    cluster.access_modes = ["ReadWriteOncePod"]
    with pytest.raises(RetrieveError, match="ReadWriteOncePod and pod run-a-master-0"):
        plan_reader(SETTINGS, cluster, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stack", "nope"], "error: stack 'nope': no stack file"),
        (["--stack", "dev", "--all", "--epoch", "2"], "not allowed with argument"),
    ],
)
def test_wrong_input_ends_in_one_line_before_anything_is_created(
    args: list[str], message: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.retrieve", *args, "--out", str(tmp_path / "out")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_claim_the_reader_may_not_read_says_whose_it_is_and_what_to_set() -> None:
    stderr = (
        "ls: cannot open directory '/checkpoints/run-a': Permission denied\n"
        "tar: manifest.json: Cannot open: Permission denied\n"
    )
    message = unreadable(SETTINGS, stderr)
    assert message is not None and "\n" not in message
    assert message.startswith(
        f"the reader pod (user {TRAINER_UID}, groups {TRAINER_GID} and {TRAINER_GID}, as the "
        "job's pods: job.securityContext) may not read the claim: tar: manifest.json"
    )
    assert "job.securityContext to their owner's user or group" in message
    # Anything else is not a question of who reads: the caller's own words stand.
    assert unreadable(SETTINGS, "ls: cannot access '/checkpoints/run-a': No such file") is None


class RefusingCore:
    """The API server of a namespace whose Pod Security refuses the reader pod."""

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> None:
        from kubernetes.client import ApiException

        error = ApiException(status=403, reason="Forbidden")
        error.body = json.dumps(
            {
                "kind": "Status",
                "message": f'pods "{body["metadata"]["name"]}" is forbidden: violates '
                'PodSecurity "restricted:latest": runAsNonRoot != true',
            }
        )
        raise error


def reader_pod(core: Any, namespace: str = "default") -> ReaderPod:
    """The stack's reader pod (the job's image, any node) on a cluster whose API is `core`."""
    cluster = SimpleNamespace(core=core, namespace=namespace)
    reader = Reader(image=IMAGE, pull_secret=None, node=None, trainer_image=True)
    return ReaderPod(cluster, SETTINGS, reader)  # type: ignore[arg-type]


def test_a_reader_pod_the_namespace_refuses_is_one_line_with_the_api_servers_reason() -> None:
    pod = reader_pod(RefusingCore(), "team")
    with pytest.raises(RetrieveError) as raised:
        pod.__enter__()
    assert str(raised.value) == (
        f'the API server refused reader pod {pod.name}: pods "{pod.name}" is forbidden: '
        'violates PodSecurity "restricted:latest": runAsNonRoot != true'
    )


UNREACHABLE_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "me", "user": {"token": "t"}}],
    "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "me"}}],
    "current-context": "gone",
}


def retrieve_dev(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.retrieve", "--stack", "dev", "--out", str(tmp_path / "out")],
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_no_kubeconfig_is_one_line_naming_kubeconfig_and_make_cluster(tmp_path: Path) -> None:
    done = retrieve_dev(tmp_path, {})
    assert done.returncode == 2
    assert done.stderr == (
        "error: no kubeconfig at ~/.kube/config: set KUBECONFIG to your cluster's (or, "
        "for the one-machine cluster, kubeContext: pytorch-distributed-local in the stack, as "
        "Pulumi.local.yaml has)\n"
    )
    assert not (tmp_path / "out").exists()


def test_an_unreachable_api_server_is_one_line_naming_it(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(UNREACHABLE_KUBECONFIG))
    done = retrieve_dev(tmp_path, {"KUBECONFIG": str(kubeconfig)})
    assert done.returncode == 2
    assert done.stderr == (
        f"error: the Kubernetes API server https://127.0.0.1:1 (kubeconfig {kubeconfig}) cannot "
        "be reached: connection refused; is the cluster up, and KUBECONFIG its kubeconfig? (or, "
        "for the one-machine cluster, kubeContext: pytorch-distributed-local in the stack, as "
        "Pulumi.local.yaml has)\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_node_that_cannot_serve_exec_is_one_line(tmp_path: Path) -> None:
    """The reader pod runs, but its node cannot give the API server an exec session (kwok's
    fake nodes run no container; here nothing answers at all)."""
    from kubernetes.client import ApiClient, Configuration

    configuration = Configuration()
    configuration.host = "https://127.0.0.1:1"
    cluster = SimpleNamespace(api=ApiClient(configuration), namespace="default")
    reader = Reader(image=IMAGE, pull_secret=None, node=None, trainer_image=True)
    pod = ReaderPod(cluster, SETTINGS, reader)  # type: ignore[arg-type]
    pod.node = "kwok-node-0"
    with pytest.raises(RetrieveError) as raised:
        pod.run(["ls", "/checkpoints"])
    assert raised.value.exit_code == 2
    message = str(raised.value)
    assert message.startswith(f"cannot run ls in reader pod {pod.name} on node kwok-node-0 (")
    assert message.endswith(
        "): the node does not serve exec to the API server; on a cluster whose nodes do, "
        "`make checkpoint` works as it is"
    )
    assert "\n" not in message


class FinishedExec:
    """A closed exec session whose error channel holds the API server's Status."""

    def __init__(self, status: dict[str, Any] | None) -> None:
        self.status = status

    def read_channel(self, channel: int) -> str:
        return "" if self.status is None else json.dumps(self.status)


def test_the_exit_code_of_an_exec_or_the_node_that_never_ran_it() -> None:
    reader = Reader(image=IMAGE, pull_secret=None, node="kwok-node-1", trainer_image=True)
    pod = ReaderPod(SimpleNamespace(), SETTINGS, reader)  # type: ignore[arg-type]
    assert pod._exit_code(FinishedExec({"status": "Success"}), "ls") == 0
    exited = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "2"}]},
    }
    assert pod._exit_code(FinishedExec(exited), "ls") == 2
    # What the API server writes when the kubelet (here kwok's node) cannot run it at all.
    never_ran = {
        "status": "Failure",
        "message": 'error sending request: Post "https://127.0.0.1:53177/exec/default/'
        'run-a-checkpoint-reader-1f32a4/reader?command=ls": EOF',
    }
    with pytest.raises(RetrieveError) as raised:
        pod._exit_code(FinishedExec(never_ran), "ls")
    assert raised.value.exit_code == 2
    assert str(raised.value) == (
        f"cannot run ls in reader pod {pod.name} on node kwok-node-1 (error sending request: "
        "Post: EOF): the node does not serve exec to the API server; on a cluster whose nodes "
        "do, `make checkpoint` works as it is"
    )


# -- what is copied: the trainer's verified checkpoints, or a command of your own's directory ----


class LocalReader:
    """The reader pod with the claim on this machine: its commands run here, the claim's mount
    path mapped to `claim` (what a pod's `ls` and `tar` see there)."""

    def __init__(self, claim: Path, mount_path: str = "/checkpoints") -> None:
        self.claim, self.mount_path = claim, mount_path
        self.commands: list[list[str]] = []

    def local(self, path: str) -> str:
        return str(self.claim) + path.removeprefix(self.mount_path)

    def run(self, command: list[str]) -> tuple[int, str, str]:
        self.commands.append(command)
        mapped = [
            self.local(word) if word.startswith(self.mount_path) else word for word in command
        ]
        done = subprocess.run(mapped, capture_output=True, text=True, timeout=60, check=False)
        return done.returncode, done.stdout, done.stderr

    def copy_out(self, directory: str, files: Any, out: Path) -> None:
        archive = subprocess.run(
            ["tar", "-cf", "-", "-C", self.local(directory), *files],
            capture_output=True,
            timeout=60,
            check=True,
        )
        subprocess.run(["tar", "-xf", "-", "-C", str(out)], input=archive.stdout, check=True)


OWN_SETTINGS = parse_settings(
    {"image": {"build": False, "ref": IMAGE}, "job": {"name": "run-b", "command": ["train.py"]}}
)


def test_a_directory_a_command_of_your_own_wrote_is_copied_whole_and_said_unverified(
    tmp_path: Path,
) -> None:
    from tools.retrieve import copy_run

    run = tmp_path / "claim" / "run-b"
    (run / "logs").mkdir(parents=True)
    (run / "checkpoint.pt").write_bytes(b"weights")
    (run / "logs" / "train.log").write_text("epoch 1\n")
    said: list[str] = []

    copied = copy_run(
        LocalReader(tmp_path / "claim"), OWN_SETTINGS, tmp_path / "out", say=said.append
    )

    assert copied.verified is False
    assert copied.paths == [tmp_path / "out" / "checkpoint.pt", tmp_path / "out" / "logs"]
    assert (tmp_path / "out" / "checkpoint.pt").read_bytes() == b"weights"
    assert (tmp_path / "out" / "logs" / "train.log").read_text() == "epoch 1\n"
    assert said == [
        "/checkpoints/run-b has no manifest.json (the trainer's, against which each checkpoint "
        "is verified): copied its 2 entries as they are, unverified: checkpoint.pt, logs"
    ]


def test_an_epoch_of_a_directory_without_the_trainers_manifest_is_refused(tmp_path: Path) -> None:
    from tools.retrieve import copy_run

    (tmp_path / "claim" / "run-b").mkdir(parents=True)
    (tmp_path / "claim" / "run-b" / "checkpoint.pt").write_bytes(b"w")
    with pytest.raises(RetrieveError) as refused:
        copy_run(LocalReader(tmp_path / "claim"), OWN_SETTINGS, tmp_path / "out", epoch=3)
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith("--epoch = 3: /checkpoints/run-b has no manifest.json")
    assert not (tmp_path / "out").exists()


def test_an_empty_directory_of_your_own_command_is_one_line(tmp_path: Path) -> None:
    from tools.retrieve import copy_run

    with pytest.raises(RetrieveError) as refused:
        copy_run(LocalReader(tmp_path / "claim"), OWN_SETTINGS, tmp_path / "out")
    assert str(refused.value) == (
        "nothing in /checkpoints/run-b on the claim yet (job.command writes $CHECKPOINT_DIR)"
    )


def test_the_trainers_manifest_is_verified_whatever_wrote_it(tmp_path: Path) -> None:
    """A command of your own that uses the trainer's store (or the trainer itself) leaves its
    manifest: the newest checkpoint is copied and its sha256 checked, a corrupt one refused."""
    import torch

    from tools.retrieve import copy_run
    from trainer.checkpoint import CheckpointStore
    from trainer.checkpoint_schema import TrainingCheckpoint

    run = tmp_path / "claim" / "run-b"
    run.mkdir(parents=True)
    store = CheckpointStore(run, keep=3)
    for epoch in (1, 2):
        state = TrainingCheckpoint(
            model_state={"weight": torch.full((2,), float(epoch))},
            epochs_run=epoch,
            world_size=2,
            config_fingerprint="f",
        ).to_state()
        store.commit(state, epochs=epoch, step=0)
    reader = LocalReader(tmp_path / "claim")
    said: list[str] = []

    copied = copy_run(reader, OWN_SETTINGS, tmp_path / "out", say=said.append)

    newest = store.manifest()[-1]
    assert copied.verified is True and copied.paths == [tmp_path / "out" / newest.file]
    assert said[-1].endswith(f"epoch 2, sha256 {newest.sha256} verified")
    # The image of your own has no trainer to describe them: nothing ran but ls and tar.
    assert [command[0] for command in reader.commands] == ["ls"]
    (run / newest.file).write_bytes(b"corrupt")
    with pytest.raises(RetrieveError, match="sha256"):
        copy_run(reader, OWN_SETTINGS, tmp_path / "again")


def test_the_reader_describes_with_the_trainer_only_when_the_job_ran_it() -> None:
    cluster = ClusterState()
    assert plan_reader(SETTINGS, cluster, None).trainer_image is True  # type: ignore[arg-type]
    assert plan_reader(OWN_SETTINGS, cluster, None).trainer_image is False  # type: ignore[arg-type]


def test_a_sharded_checkpoint_is_copied_whole_and_every_file_verified(tmp_path: Path) -> None:
    """--parallelism fsdp's checkpoints are directories: the copy takes every file the manifest
    lists for it and checks each one's sha256; one damaged shard fails the copy."""
    from tests.trainer.conftest import fake_sharded_commit
    from tools.retrieve import copy_run
    from trainer.checkpoint import CheckpointStore

    run = tmp_path / "claim" / "run-b"
    run.mkdir(parents=True)
    store = CheckpointStore(run, keep=3)
    for epoch in (1, 2):
        newest = fake_sharded_commit(store, epoch, shards=3)
    said: list[str] = []

    copied = copy_run(
        LocalReader(tmp_path / "claim"), OWN_SETTINGS, tmp_path / "out", say=said.append
    )

    assert copied.verified is True and copied.paths == [tmp_path / "out" / newest.file]
    assert newest.files is not None
    for name in newest.files:
        assert (tmp_path / "out" / newest.file / name).read_bytes() == (
            run / newest.file / name
        ).read_bytes()
    assert said[-1].endswith(f"epoch 2, sha256 {newest.sha256} verified")
    (run / newest.file / "__2_0.distcp").write_bytes(b"corrupt")
    with pytest.raises(RetrieveError, match=r"__2_0\.distcp"):
        copy_run(LocalReader(tmp_path / "claim"), OWN_SETTINGS, tmp_path / "again")


def _archive(members: dict[str, bytes | None]) -> io.BytesIO:
    """A tar stream: bytes make a file, None a symlink to /etc/passwd."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("has_data_filter", [True, False], ids=["python-3.11.4+", "python-3.11.2"])
def test_the_copy_extracts_files_and_refuses_what_escapes_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_data_filter: bool
) -> None:
    """Debian bookworm's Python 3.11.2 has no tarfile filter: the same refusals by hand."""
    from tools.retrieve import extract_data

    if not has_data_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
        real_extractall = tarfile.TarFile.extractall

        def without_filter(self: tarfile.TarFile, path: Any = ".", members: Any = None) -> None:
            real_extractall(self, path, members=members)

        monkeypatch.setattr(tarfile.TarFile, "extractall", without_filter)
    good = tmp_path / "good"
    with tarfile.open(fileobj=_archive({"manifest.json": b"{}", "e1.pt": b"x"}), mode="r|") as a:
        extract_data(a, good)
    assert (good / "manifest.json").read_bytes() == b"{}" and (good / "e1.pt").read_bytes() == b"x"
    for members in ({"../escaped.pt": b"x"}, {"link.pt": None}):
        with (
            pytest.raises(tarfile.TarError),
            tarfile.open(fileobj=_archive(members), mode="r|") as archive,
        ):
            extract_data(archive, tmp_path / "bad")
    assert not (tmp_path / "escaped.pt").exists()
    assert not (tmp_path / "bad" / "link.pt").is_symlink()


class BatchedExec:
    """An exec client with kubernetes.stream.ws_client's reading rules: `update()` takes in
    every frame that has arrived (here one scripted batch), and reading a channel that holds
    nothing updates first. A batch may end with the close (None)."""

    def __init__(
        self,
        batches: list[list[tuple[int | None, bytes]]],
        later: list[list[tuple[int | None, bytes]]] | None = None,
    ) -> None:
        self.batches = batches
        # Frames still on the network once `batches` are in: only an update that waits sees them.
        self.later = later or []
        self.channels: dict[int, bytes] = {}
        self.open = True

    def is_open(self) -> bool:
        return self.open

    def update(self, timeout: float | None = 0) -> None:
        if not self.batches and (timeout is None or timeout > 0):
            self.batches, self.later = self.later[:1], self.later[1:]
        if not self.open or not self.batches:
            return
        for channel, data in self.batches.pop(0):
            if channel is None:
                self.open = False
                return
            self.channels[channel] = self.channels.get(channel, b"") + data

    def read_channel(self, channel: int, timeout: float | None = 0) -> bytes:
        if channel not in self.channels:
            self.update(timeout)
        return self.channels.pop(channel, b"")

    def read_stdout(self, timeout: float | None = None) -> bytes:
        return self.read_channel(1, timeout)

    def read_stderr(self, timeout: float | None = None) -> bytes:
        return self.read_channel(2, timeout)


def test_a_tar_whose_tail_arrives_with_the_close_is_read_whole(tmp_path: Path) -> None:
    """The last data, the Status and the close taken in by one read (while stderr was read):
    the tail is in the client's buffer after the stream closed, and is still read."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "checkpoint.pt").write_bytes(bytes(range(256)) * 200)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as writing:
        writing.add(source / "checkpoint.pt", arcname="checkpoint.pt")
    data = archive.getvalue()
    half = len(data) // 2
    status = json.dumps({"status": "Success"}).encode()
    ws = BatchedExec([[(1, data[:half])], [(1, data[half:]), (3, status), (None, b"")]])

    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(fileobj=io.BufferedReader(_ExecStdout(ws)), mode="r|") as reading:
        extract_data(reading, out)
    assert (out / "checkpoint.pt").read_bytes() == (source / "checkpoint.pt").read_bytes()


class OnePod:
    """The API's answer about the reader pod: always the same pod."""

    def __init__(self, status: Any) -> None:
        self.pod = SimpleNamespace(status=status, spec=SimpleNamespace(node_name="real-node"))

    def read_namespaced_pod(self, name: str, namespace: str) -> Any:
        return self.pod


def test_a_reader_pod_the_node_evicted_says_why() -> None:
    status = SimpleNamespace(
        phase="Failed",
        reason="Evicted",
        message="The node had condition: [DiskPressure]. ",
        container_statuses=None,
    )
    pod = reader_pod(OnePod(status))
    with pytest.raises(RetrieveError) as raised:
        pod._wait_running()
    assert str(raised.value) == (
        f"reader pod {pod.name} ended (Failed: Evicted: The node had condition: [DiskPressure].)"
    )


# -- a run kept in object storage (checkpoints.storage: s3): copied from this machine -------------


def _run_in_bucket(bucket: str) -> str:
    from tests.trainer.conftest import fake_state
    from trainer.checkpoint import CheckpointStore

    root = f"s3://{bucket}/runs/ddp"
    store = CheckpointStore(root)
    for epochs in (1, 2, 3):
        store.commit(fake_state(float(epochs), epochs), epochs, 0)
    store.storage.append_line("metrics.jsonl", '{"epoch": 3, "loss": 0.5}')
    return root


def test_a_bucket_run_is_copied_and_verified_from_this_machine(
    s3_bucket: str, tmp_path: Path
) -> None:
    from tools.retrieve import copy_from_storage

    root = _run_in_bucket(s3_bucket)
    said: list[str] = []
    copied = copy_from_storage(root, tmp_path / "out", say=said.append)
    assert copied.verified
    assert copied.paths == [tmp_path / "out" / "checkpoint-e000003-s000000.pt"]
    assert (tmp_path / "out" / "manifest.json").is_file()
    assert (tmp_path / "out" / "metrics.jsonl").read_text() == '{"epoch": 3, "loss": 0.5}\n'
    assert said[0].startswith(f"{root}: newest verified checkpoint {root}/")
    assert said[-1].endswith("verified") and "epoch 3" in said[-1]

    older = copy_from_storage(root, tmp_path / "two", epoch=2, say=said.append)
    assert len(older.paths) == 1 and older.paths[0].is_file()
    every = copy_from_storage(root, tmp_path / "all", every=True, say=said.append)
    assert len(every.paths) == 2  # what the trainer's retention (--keep 2) left


def test_a_sharded_checkpoint_in_the_bucket_is_copied_whole_and_verified(
    s3_bucket: str, tmp_path: Path
) -> None:
    """FSDP's checkpoints are folders of objects: every file the manifest lists comes over, and
    the copy verifies as a checkpoint of this machine's filesystem."""
    from tests.trainer.conftest import fake_sharded_commit
    from tools.retrieve import copy_from_storage
    from trainer.checkpoint import CheckpointStore

    root = f"s3://{s3_bucket}/runs/fsdp"
    entry = fake_sharded_commit(CheckpointStore(root), 2)
    copied = copy_from_storage(root, tmp_path / "out", say=lambda line: None)
    assert copied.verified and copied.paths == [tmp_path / "out" / entry.file]
    assert entry.files is not None
    assert sorted(path.name for path in copied.paths[0].iterdir()) == sorted(entry.files)
    CheckpointStore(tmp_path / "out").verify(entry)


def test_a_damaged_object_in_the_bucket_is_refused_by_its_sha256(
    s3_bucket: str, tmp_path: Path
) -> None:
    from tools.retrieve import copy_from_storage
    from trainer.checkpoint import CheckpointStore

    root = _run_in_bucket(s3_bucket)
    store = CheckpointStore(root)
    first = store.manifest()[0]
    store.storage.write(first.file, lambda sink: sink.write(b"damaged"))
    with pytest.raises(RetrieveError, match=r"sha256|size") as refused:
        copy_from_storage(root, tmp_path / "out", every=True, say=lambda _: None)
    assert refused.value.exit_code == 1


def test_a_missing_bucket_is_exit_code_2_naming_it(s3_bucket: str, tmp_path: Path) -> None:
    from tools.retrieve import copy_from_storage

    with pytest.raises(RetrieveError, match=f"{s3_bucket}-gone, which does not exist") as refused:
        copy_from_storage(f"s3://{s3_bucket}-gone/run", tmp_path / "out", say=lambda _: None)
    assert refused.value.exit_code == 2
    assert not (tmp_path / "out").exists()


def test_make_checkpoint_of_an_s3_stack_reads_its_bucket_with_its_endpoint_and_region(
    s3_server: Any, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No reader pod: the stack's endpoint and region, this environment's key."""
    from tests.trainer.conftest import fake_state
    from tools.retrieve import retrieve
    from trainer.checkpoint import CheckpointStore

    settings = parse_settings(
        {
            "image": {"repository": "registry.example.com/ml/trainer"},
            "checkpoints": {
                "storage": "s3",
                "bucket": s3_bucket,
                "prefix": "runs",
                "endpoint": s3_server.url,
            },
            "job": {"name": "ddp-s3"},
        },
        stack="s3",
    )
    assert settings.checkpoint_dir == f"s3://{s3_bucket}/runs/ddp-s3"
    CheckpointStore(settings.checkpoint_dir).commit(fake_state(1.0, 1), 1, 0)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    s3.forget_clients()
    said: list[str] = []
    copied = retrieve(settings, tmp_path / "out", say=said.append)
    assert copied.verified and copied.paths == [tmp_path / "out" / "checkpoint-e000001-s000000.pt"]
    assert "AWS_ENDPOINT_URL_S3" not in os.environ  # the stack's, for the copy only


def test_make_checkpoint_of_an_s3_stack_says_which_bucket_is_missing(
    s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    s3.forget_clients()
    settings = parse_settings(
        {
            "image": {"repository": "registry.example.com/ml/trainer"},
            "checkpoints": {"storage": "s3", "bucket": "never-made"},
            "job": {"name": "ddp-s3"},
        },
        stack="s3",
    )
    from tools.retrieve import retrieve

    with pytest.raises(
        RetrieveError, match="in bucket never-made, which does not exist"
    ) as refused:
        retrieve(settings, tmp_path / "out", say=lambda _: None)
    assert refused.value.exit_code == 2
    assert not (tmp_path / "out").exists()
