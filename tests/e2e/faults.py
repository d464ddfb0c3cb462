"""Faults caused while a `make up` or `make destroy` runs, at a random moment of the window where
they matter, and the checks that the next command recovered (tests/e2e/test_faults*.py).

A command runs in the background in a session of its own, as a terminal job does, and is watched
through its engine event log (`--event-log`, one JSON event a line, written as they happen; `up`
truncates it when the update follows its preview). A fault fires once a randomly chosen event of
the window has been seen, after a random delay: the seed is printed in every failure message and
`PD_E2E_FAULT_SEED=<seed>` repeats the same choices.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from builders.manifests import resource_names
from settings.stack import PROJECT
from tests.e2e.conftest import Cluster, Result, Stack, read_events
from tools.pulumi_run import file_backend_dir, remove_torn_metadata, stack_state_dir

SEED = int(os.environ.get("PD_E2E_FAULT_SEED") or random.SystemRandom().randrange(2**32))
NAMESPACE = "default"
JOB_TYPE = "kubernetes:kubeflow.org/v1:PyTorchJob"
CLAIM_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"
SECRET_TYPE = "kubernetes:core/v1:Secret"
# The Kubernetes object types a stack of this project holds, and how the cluster lists them.
OBJECT_TYPES = (SECRET_TYPE, CLAIM_TYPE, JOB_TYPE)

Event = dict[str, Any]
Predicate = Callable[[Event], bool]


def seeded(name: str) -> random.Random:
    """The random choices of one test, from the module seed and the test's name."""
    return random.Random(f"{SEED}:{name}")


def step(event: Event, kind: str = "") -> dict[str, Any] | None:
    """The metadata of a resource step of the real run (not its preview): `pre` when the engine
    begins it, `outputs` when it is done; None for any other event."""
    for key, name in (("resourcePreEvent", "pre"), ("resOutputsEvent", "outputs")):
        body = event.get(key)
        if body is not None and not body.get("planning") and (not kind or kind == name):
            return body["metadata"]
    return None


def began(resource_type: str, op: str = "") -> Predicate:
    def matches(event: Event) -> bool:
        metadata = step(event, "pre")
        return (
            metadata is not None
            and metadata["type"] == resource_type
            and (not op or metadata["op"] == op)
        )

    return matches


def finished(resource_type: str) -> Predicate:
    def matches(event: Event) -> bool:
        metadata = step(event, "outputs")
        return metadata is not None and metadata["type"] == resource_type

    return matches


def any_object_done(event: Event) -> bool:
    """A Kubernetes object of the stack was just made or changed (not left as it was)."""
    metadata = step(event, "outputs")
    return metadata is not None and metadata["type"] in OBJECT_TYPES and metadata["op"] != "same"


@dataclass(frozen=True)
class Moment:
    """A point of the window: once `predicate`'s event has been seen, wait up to `max_delay`."""

    what: str
    predicate: Predicate
    max_delay: float


@dataclass
class Running:
    """`make ACTION STACK=... EVENT_LOG=...` in the background, in a session of its own (make is
    its leader), as a terminal job is."""

    stack: Stack
    action: str
    popen: subprocess.Popen[bytes]
    events_file: Path
    output_file: Path
    _events: list[Event] = field(default_factory=list)

    @classmethod
    def start(cls, stack: Stack, action: str, *flags: str) -> Running:
        work_dir = stack.project.work_dir
        stamp = time.monotonic_ns()
        events_file = work_dir / f".events-{stack.name}-{stamp}.jsonl"
        output_file = work_dir / f".output-{stack.name}-{stamp}.log"
        with output_file.open("wb") as output:
            popen = stack.project.popen(
                stack.make_argv(action, *flags, events_file=events_file),
                env=stack.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return cls(stack, action, popen, events_file, output_file)

    def events(self) -> list[Event]:
        """The events of the log as it is now (the update's, once `up` is past its preview)."""
        try:
            lines = self.events_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        # The last line may still be half written; the log restarts when the update begins.
        self._events = [json.loads(line) for line in lines if line.endswith("}")]
        return self._events

    def ended(self) -> bool:
        """The command is over, or as good as over: its summary is written."""
        return self.popen.poll() is not None or any(
            "summaryEvent" in event for event in self.events()
        )

    def wait_for(self, what: str, predicate: Predicate, timeout: float = 300) -> Event:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if predicate(event):
                    return event
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.action} ended before {what}:\n{self.output()}")
            time.sleep(0.02)
        raise AssertionError(f"no {what} after {timeout:.0f}s (seed {SEED}):\n{self.output()}")

    def at_random(self, rng: random.Random, moments: Sequence[Moment]) -> str:
        """Wait for one of `moments`, chosen at random, plus a random part of its delay; say
        which, for the failure messages. Fails if the command ended first."""
        moment = rng.choice(moments)
        self.wait_for(moment.what, moment.predicate)
        delay = rng.uniform(0, moment.max_delay)
        time.sleep(delay)
        described = f"{delay:.2f}s after {moment.what} (seed {SEED})"
        assert not self.ended(), f"the {self.action} ended before the fault, {described}"
        return described

    def processes(self) -> list[psutil.Process]:
        """make and every descendant (the script, the CLI, its plugins, the program)."""
        try:
            root = psutil.Process(self.popen.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cli_process(self) -> psutil.Process:
        """The `pulumi` CLI itself (the one whose pid its lock records)."""
        for process in self.processes():
            try:
                if process.name() == "pulumi":
                    return process
            except psutil.NoSuchProcess:
                continue
        raise AssertionError("no pulumi process under the running command")

    def kill(self) -> None:
        """SIGKILL to everything at once: what a cancelled CI job, a closed cloud shell or the
        OOM killer on a small machine does. Nothing gets to clean up."""
        for process in self.processes():
            try:
                process.kill()
            except psutil.NoSuchProcess:
                continue
        self.popen.wait(timeout=60)

    def interrupt(self) -> None:
        """Ctrl-C at the terminal: SIGINT to the foreground process group."""
        os.killpg(self.popen.pid, signal.SIGINT)

    def output(self) -> str:
        return self.output_file.read_text(errors="replace")

    def result(self, timeout: float = 600) -> Result:
        returncode = self.popen.wait(timeout=timeout)
        events = read_events(self.events_file) if self.events_file.exists() else []
        return Result(returncode, self.output(), events)


# -- what the cluster and the state hold --------------------------------------------------------


@dataclass(frozen=True)
class StackObject:
    type: str
    namespace: str
    name: str
    uid: str


# The finalizer that holds a job's delete in progress (Kube.job_deletion_held).
HOLD_FINALIZER = "e2e.pytorch-distributed.dev/hold"


class Kube:
    """The stack's objects as the cluster has them (by the instance label every object carries)."""

    def __init__(self, cluster: Cluster) -> None:
        from kubernetes import client

        api = cluster.api()
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def objects(self, instance: str) -> list[StackObject]:
        selector = f"app.kubernetes.io/instance={instance}"
        secrets = self.core.list_namespaced_secret(NAMESPACE, label_selector=selector).items
        claims = self.core.list_namespaced_persistent_volume_claim(
            NAMESPACE, label_selector=selector
        ).items
        jobs = self.custom.list_namespaced_custom_object(
            "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", label_selector=selector
        )["items"]
        found = [
            StackObject(kind, item.metadata.namespace, item.metadata.name, item.metadata.uid)
            for kind, items in ((SECRET_TYPE, secrets), (CLAIM_TYPE, claims))
            for item in items
            if item.metadata.deletion_timestamp is None
        ]
        found += [
            StackObject(
                JOB_TYPE,
                job["metadata"]["namespace"],
                job["metadata"]["name"],
                job["metadata"]["uid"],
            )
            for job in jobs
            if not job["metadata"].get("deletionTimestamp")
        ]
        return sorted(found, key=lambda o: (o.type, o.name))

    @contextlib.contextmanager
    def job_deletion_held(self, name: str) -> Iterator[None]:
        """While the block runs, the job's delete stays in progress (a finalizer of the test's,
        as another controller's would hold it), so a kill "while the job is being deleted"
        lands there however fast the machine deletes; released (the delete completes) after."""
        self._set_hold(name, held=True)
        try:
            yield
        finally:
            self._set_hold(name, held=False)

    def _set_hold(self, name: str, *, held: bool) -> None:
        from kubernetes.client import ApiException

        try:
            job = self.custom.get_namespaced_custom_object(
                "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", name
            )
        except ApiException as error:
            if error.status == 404 and not held:
                return
            raise
        others = [f for f in job["metadata"].get("finalizers") or [] if f != HOLD_FINALIZER]
        finalizers = [*others, HOLD_FINALIZER] if held else others
        self.custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            NAMESPACE,
            "pytorchjobs",
            name,
            {"metadata": {"finalizers": finalizers}},
        )

    def uids(self, instance: str) -> dict[tuple[str, str], str]:
        return {(o.type, o.name): o.uid for o in self.objects(instance)}

    def wait_for(self, instance: str, kind: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(o.type == kind for o in self.objects(instance)):
            assert time.monotonic() < deadline, f"no {kind} of {instance} after {timeout:.0f}s"
            time.sleep(0.1)

    def wait_until_gone(self, instance: str, kinds: Sequence[str], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while any(o.type in kinds for o in self.objects(instance)):
            assert time.monotonic() < deadline, f"still there: {self.objects(instance)}"
            time.sleep(0.5)


def exported(stack: Stack) -> dict[str, Any]:
    return json.loads(stack.cli("stack", "export").stdout).get("deployment") or {}


def state_dir(stack: Stack) -> Path:
    """Where the suite's file backend keeps the stack's state."""
    backend = file_backend_dir(stack.project.variables["PULUMI_BACKEND_URL"])
    assert backend is not None
    return stack_state_dir(backend, PROJECT)


def pending_after_a_kill(stack: Stack) -> list[Any] | None:
    """The operations a killed command left pending, read before the next `make` command: a kill
    in the moment the backend saves the state leaves its metadata file empty (the next command
    removes it: test_a_state_save_torn_by_a_kill_is_read_again), which the plain CLI this reads
    with cannot read past, so it is removed here first, as that command would."""
    remove_torn_metadata(state_dir(stack), stack.name)
    return exported(stack).get("pending_operations")


def state_objects(deployment: dict[str, Any]) -> set[tuple[str, str]]:
    """(type, namespace/name) of each Kubernetes object the state manages."""
    return {
        (resource["type"], resource["id"])
        for resource in deployment.get("resources") or []
        if resource["type"] in OBJECT_TYPES
    }


@dataclass(frozen=True)
class Claim:
    """The checkpoint claim and a file a run left on it: both must outlive every fault and every
    recovery (and, retained, every destroy)."""

    uid: str
    marker: Path | None
    marker_text: str

    @classmethod
    def mark(cls, kube: Kube, cluster: Cluster, name: str, text: str) -> Claim:
        """Write `text` to a file on the claim's volume (on the suite's own control plane, where
        the volume is a directory here)."""
        found = kube.core.read_namespaced_persistent_volume_claim(name, NAMESPACE)
        marker = None
        if cluster.plane is not None and found.spec.volume_name:
            marker = (
                cluster.plane.volume_path(found.spec.volume_name) / "written-before-a-fault.txt"
            )
            marker.write_text(text)
        return cls(found.metadata.uid, marker, text)


def assert_recovered(
    stack: Stack,
    kube: Kube,
    claim: Claim | None,
    *,
    deployed: bool,
    survivors: dict[tuple[str, str], str],
    context: str,
) -> None:
    """After the next command: nothing pending; the cluster holds exactly what the state
    manages (all of the stack's objects when `deployed`, only the retained claim otherwise);
    objects that existed after the fault are the same objects (their UIDs), and the claim keeps
    its UID and its data; a preview of a deployed stack changes nothing."""
    names = resource_names(stack.settings())
    deployment = exported(stack)
    assert deployment.get("pending_operations") in (None, []), (
        f"pending after recovery ({context}): {deployment['pending_operations']}"
    )
    in_state = state_objects(deployment)
    in_cluster = kube.objects(names.job)
    found = {(o.type, f"{o.namespace}/{o.name}") for o in in_cluster}
    if deployed:
        assert found == in_state, f"cluster {sorted(found)} != state {sorted(in_state)} ({context})"
        expected = {(t, f"{NAMESPACE}/{n}") for t, n in object_names(stack)}
        assert in_state == expected, f"state {sorted(in_state)} ({context})"
    else:
        assert in_state == set(), f"left in the state: {sorted(in_state)} ({context})"
        retained = {(CLAIM_TYPE, f"{NAMESPACE}/{names.claim}")} if claim is not None else set()
        assert found == retained, f"left in the cluster: {sorted(found)} ({context})"
    now = {(o.type, o.name): o.uid for o in in_cluster}
    for key, uid in survivors.items():
        if key in now:
            assert now[key] == uid, f"{key} was made again ({context})"
    if claim is not None:
        assert now.get((CLAIM_TYPE, names.claim)) == claim.uid, f"claim replaced ({context})"
        if claim.marker is not None:
            assert claim.marker.read_text() == claim.marker_text, f"claim data lost ({context})"
    if deployed:
        stack.preview("--expect-no-changes")


def ensure_deployed(stack: Stack) -> None:
    """The stack up (each test starts from the state it needs, whatever ran before it)."""
    if state_objects(exported(stack)) != {(t, f"{NAMESPACE}/{n}") for t, n in object_names(stack)}:
        stack.up()


def ensure_destroyed(stack: Stack) -> None:
    if state_objects(exported(stack)):
        stack.destroy()


def object_names(stack: Stack) -> list[tuple[str, str]]:
    names = resource_names(stack.settings())
    listed = [(CLAIM_TYPE, names.claim), (JOB_TYPE, names.job)]
    if names.pull_secret is not None:
        listed.append((SECRET_TYPE, names.pull_secret))
    return listed


def explained(result: Result) -> list[str]:
    """The lines pulumi-stack.sh (tools/pulumi_run.py) added to what the CLI printed."""
    return [line for line in result.output.splitlines() if line.startswith("pulumi-stack.sh: ")]
