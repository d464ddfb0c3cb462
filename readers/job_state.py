"""What a training job and its pods say about a training run, in words a person can act on.

Pure functions over the API server's JSON (what `kubectl get -o json` prints): the resource hooks
that make `pulumi up` wait for the job (components/job_outcome.py) and `make status`
(tools/status.py) read the same objects through readers/job_watch.py and report them with the
same words, so a failure reads the same in both places.

The job's API (builders/job_apis/, found by the job's `kind`) says what its conditions are in
the words used here (Created, Running, Restarting, Succeeded, Failed, Suspended, each with a
reason, a message and lastTransitionTime; once Failed is true nothing changes them again), which
pod of the job a pod is, and the training container's name. A PyTorchJob's conditions are the
operator's own; a TrainJob's Complete is told as Succeeded and its Running is derived from its
pods.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from builders.job_apis import JobApi, api_of_kind
from readers.conditions import Condition, condition_of
from readers.queue_state import QUEUED_REMINDER_SECONDS, QueueState, queue_line

DEFAULT_KIND = "PyTorchJob"
LOG_LINES = 20
# The order a person reads a job's life in; conditions the operator adds later go last.
CONDITION_ORDER = ("Created", "Suspended", "Running", "Restarting", "Succeeded", "Failed")
# The trainer's exit code when a collective fails because another rank is gone (trainer/cli.py's
# EXIT_PEER_LOST; components do not import the trainer package, a test checks they agree).
PEER_LOST_EXIT_CODE = 200
# What a container waits for when it will not start without a change: a credential, reference or
# Secret that is wrong stays wrong, though the kubelet keeps retrying with a growing back-off.
START_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


@dataclass(frozen=True)
class Replica:
    """One pod of the job, as its training container last reported."""

    pod: str
    replica_type: str  # Master or Worker (a PyTorchJob), Node (a TrainJob)
    index: int
    phase: str  # the pod's phase, or Terminating once it is being deleted
    restarts: int  # container restarts in place (OnFailure); a recreated pod starts at 0
    exit_code: int | None  # the container's last exit, current or before its last restart
    # How that exit came about (Completed, Error, OOMKilled, ...), or why the kubelet refused or
    # evicted the pod when no container exited (Evicted, OutOfcpu, ...).
    reason: str
    message: str
    waiting: str  # why the container does not run now: ImagePullBackOff, Unschedulable, ...
    # The container's current state ended (the log of the current container is the one that
    # holds the failure); False when only an earlier instance ended (OnFailure restarted it).
    exited_now: bool
    uid: str
    # The pod's stable name: the operator's pod name, or a JobSet pod's hostname (its own name
    # ends in a random suffix).
    role: str = ""

    @property
    def failed(self) -> bool:
        return self.phase == "Failed" or self.exit_code not in (None, 0)

    @property
    def cannot_start(self) -> bool:
        return self.waiting in START_FAILURES

    @property
    def state(self) -> str:
        """Its phase, and what it waits for if anything: `Pending (ImagePullBackOff)`."""
        return f"{self.phase} ({self.waiting})" if self.waiting else self.phase


@dataclass(frozen=True)
class JobState:
    namespace: str
    name: str
    conditions: tuple[Condition, ...]
    replicas: tuple[Replica, ...]
    uid: str = ""
    resource_version: str = ""
    kind: str = DEFAULT_KIND  # the job's API kind: PyTorchJob or TrainJob
    # Where Kueue has the job, when it names a LocalQueue (job.queue); None otherwise.
    queue: QueueState | None = None

    @property
    def api(self) -> JobApi:
        return api_of_kind(self.kind)

    @property
    def title(self) -> str:
        """`<Kind> <namespace>/<name>`: how every line names the job."""
        return f"{self.kind} {self.namespace}/{self.name}"

    def condition(self, condition_type: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == condition_type), None)

    def is_true(self, condition_type: str) -> bool:
        found = self.condition(condition_type)
        return found is not None and found.true

    @property
    def outcome(self) -> str | None:
        """Succeeded or Failed once the job has finished, else None."""
        for final in ("Failed", "Succeeded"):
            if self.is_true(final):
                return final
        return None

    @property
    def queued(self) -> bool:
        """Kueue holds the job back: it names a LocalQueue and is not admitted."""
        return self.outcome is None and self.queue is not None and self.queue.waiting

    @property
    def inadmissible(self) -> str | None:
        """Why Kueue can never admit the job as things stand (QueueState.hopeless), else None."""
        return None if self.queue is None else self.queue.hopeless

    @property
    def phase(self) -> str:
        """The job's state in one word: its outcome, Queued while Kueue holds it back, or its
        newest true condition."""
        if self.outcome is not None:
            return self.outcome
        if self.queued:
            return "Queued"
        true = [c for c in self.conditions if c.true]
        if not true:
            return "Pending"
        # Times have whole seconds: a job whose pods ran at once (Created and Running in the same
        # second) is Running, the later of the two in the controller's list.
        _, newest = max(enumerate(true), key=lambda item: (item[1].since, item[0]))
        return newest.type

    @property
    def failed_replicas(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.failed]

    @property
    def replicas_that_cannot_start(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.cannot_start]


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def pod_refusal(status: Mapping[str, Any]) -> tuple[str, str]:
    """Why the kubelet refused or evicted a pod, from the pod's own status (its containers never
    ran, or were killed without an exit of their own): a reason (Evicted, OutOfcpu,
    NodeAffinity, ...) and a one-line message ("The node had condition: [DiskPressure]."), or
    two empty strings."""
    return str(status.get("reason") or ""), " ".join(str(status.get("message") or "").split())


def _container_status(pod: Mapping[str, Any], container: str) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    named = [status for status in statuses if status.get("name") == container]
    return (named or statuses or [{}])[0]


def replica_of(pod: Mapping[str, Any], api: JobApi | None = None) -> Replica:
    """A pod of the job as a Replica (which pod of the job its API says it is, its phase, and
    its training container's state); a PyTorchJob's pod unless `api` says otherwise."""
    api = api or api_of_kind(DEFAULT_KIND)
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    container = _container_status(pod, api.container)
    state = container.get("state") or {}
    last = (container.get("lastState") or {}).get("terminated")
    terminated = state.get("terminated")
    ended = terminated or last or {}
    reason, message = str(ended.get("reason") or ""), ended.get("message") or ""
    if not ended:
        reason, message = pod_refusal(status)
    waiting = state.get("waiting") or {}
    if waiting.get("reason") not in START_FAILURES:
        # The operator's init container (a worker's wait for the master) pulls an image too;
        # while it cannot, the training container only says PodInitializing.
        for init in status.get("initContainerStatuses") or []:
            init_waiting = (init.get("state") or {}).get("waiting") or {}
            if init_waiting.get("reason") in START_FAILURES:
                waiting = init_waiting
                break
    if waiting:
        message = waiting.get("message") or message
    unscheduled = [
        c
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    if unscheduled and not container:
        waiting = {"reason": unscheduled[0].get("reason") or "Unschedulable"}
        message = unscheduled[0].get("message") or ""
    identity = api.identify(pod)
    return Replica(
        pod=str(metadata.get("name", "")),
        replica_type=identity.replica_type,
        index=identity.index,
        phase="Terminating" if metadata.get("deletionTimestamp") else str(status.get("phase", "")),
        restarts=_int(container.get("restartCount")) or 0,
        exit_code=_int(ended.get("exitCode")),
        reason=reason,
        message=" ".join(str(message).split()),
        waiting=str(waiting.get("reason") or ""),
        exited_now=terminated is not None,
        uid=str(metadata.get("uid", "")),
        role=identity.role,
    )


def job_state(
    job: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    queue: QueueState | None = None,
) -> JobState:
    """A job and its pods (newest incarnation of each pod name), and where Kueue has it, as a
    JobState; a job without a `kind` is a PyTorchJob."""
    api = api_of_kind(str(job.get("kind") or DEFAULT_KIND))
    pods = list(pods)
    metadata = job.get("metadata") or {}
    raw = api.conditions(job, pods)
    conditions = [condition_of(c) for c in raw]
    rank = {name: index for index, name in enumerate(CONDITION_ORDER)}
    conditions.sort(key=lambda c: (rank.get(c.type, len(rank)), c.type))
    order = api.replica_order
    replicas = sorted(
        (replica_of(pod, api) for pod in pods),
        key=lambda r: (order.index(r.replica_type) if r.replica_type in order else 9, r.index),
    )
    return JobState(
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        conditions=tuple(conditions),
        replicas=tuple(replicas),
        uid=str(metadata.get("uid", "")),
        resource_version=str(metadata.get("resourceVersion", "")),
        kind=api.kind,
        queue=queue,
    )


# -- words ------------------------------------------------------------------------------------


def exit_code_meaning(code: int | None, reason: str) -> str:
    """What an exit code says about the cause, as far as the trainer's conventions tell."""
    if reason == "OOMKilled":
        return "out of memory: the kernel killed it at the pod's memory limit (job.memory)"
    if code is None or code == 0:
        return ""
    if code == 143:
        return "stopped by SIGTERM (preempted, evicted or deleted); the trainer saved a checkpoint"
    if code == 137:
        return "killed by SIGKILL (out of memory, or still running after its grace period)"
    if code == 130:
        return "stopped by SIGINT"
    if code == PEER_LOST_EXIT_CODE:
        return "lost a peer (another pod stopped or failed); the pod is recreated and resumes"
    if code > 128:
        return f"ended by signal {code - 128}"
    return "the training code or its data failed (see its log)"


def replica_line(replica: Replica) -> str:
    """One pod in a sentence: its state, how its container last ended and what that means."""
    words = [f"pod {replica.pod} ({replica.replica_type}): {replica.state or 'unknown'}"]
    if replica.exit_code is not None:
        ended = f"exit code {replica.exit_code}"
        if replica.reason:
            ended += f" ({replica.reason})"
        if not replica.exited_now:
            ended = "last " + ended
        words.append(ended)
    elif replica.reason:
        words.append(replica.reason)
    if replica.restarts:
        words.append(f"{replica.restarts} restart{'s' if replica.restarts != 1 else ''}")
    line = ", ".join(words)
    meaning = exit_code_meaning(replica.exit_code, replica.reason)
    if meaning:
        line += f": {meaning}"
    if replica.message and replica.message not in line:
        line += f"; {replica.message}"
    return line


def progress_line(state: JobState) -> str:
    """One line for the log while waiting: the job's phase and each pod's."""
    pods = ", ".join(
        f"{r.pod} {r.state}" + (f" (exit code {r.exit_code})" if r.failed else "")
        for r in state.replicas
    )
    latest = state.condition(state.phase)
    said = f": {latest.message}" if latest is not None and latest.message else ""
    if state.queue is not None and (state.queued or state.queue.admitted):
        said = f": {queue_line(state.queue)}"
    return f"{state.title} {state.phase}{said}" + (f" [{pods}]" if pods else " [no pods yet]")


def recreated_lines(before: JobState | None, after: JobState) -> list[str]:
    """A line for each pod the operator replaced between two looks at the job (restartPolicy
    ExitCode recreates a pod that exited 128 or more: same name, new pod, restart count 0)."""
    if before is None:
        return []
    earlier = {replica.pod: replica for replica in before.replicas}
    lines = []
    for replica in after.replicas:
        previous = earlier.get(replica.pod)
        if previous is None or not previous.uid or previous.uid == replica.uid:
            continue
        line = f"pod {replica.pod} was recreated"
        if previous.exit_code not in (None, 0):
            line += f": the previous one exited with code {previous.exit_code}"
            meaning = exit_code_meaning(previous.exit_code, previous.reason)
            line += f" ({meaning})" if meaning else ""
        lines.append(line)
    return lines


class Progress:
    """Tells each new state of a job being waited on as a line, after a line for each pod the
    operator recreated since the last one; `key` is what makes a state new."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._last: JobState | None = None

    @staticmethod
    def key(state: JobState) -> object:
        """What makes a state worth a line; while the job is queued, also each
        QUEUED_REMINDER_SECONDS that pass (a wait says again that, and why, it is queued)."""
        reminder = int(time.monotonic() // QUEUED_REMINDER_SECONDS) if state.queued else None
        return progress_line(state), [replica.uid for replica in state.replicas], reminder

    def __call__(self, state: JobState) -> None:
        for line in recreated_lines(self._last, state):
            self._say(line)
        self._say(progress_line(state))
        self._last = state


def failure_report(
    state: JobState,
    logs: Mapping[str, Sequence[str] | str],
    *,
    next_steps: Sequence[str] = (),
) -> str:
    """Why the job failed, for the person who has to fix it: the job, the operator's reason and
    message, each failed replica with its exit code, reason and last log lines (or why there are
    none: `logs` maps a pod to its lines, or to a string saying why they are missing), and what
    to do next."""
    failed = state.condition("Failed")
    lines = [f"{state.title} failed"]
    if failed is not None:
        lines[0] += f" ({failed.reason}, {failed.since}): {failed.message}"
    replicas = state.failed_replicas
    if not replicas:
        lines.append("  no pod of it reports a failed container (deleted by cleanPodPolicy?)")
    for replica in replicas:
        lines.append(f"  {replica_line(replica)}")
        log = logs.get(replica.pod)
        if isinstance(log, str):
            lines.append(f"    (no log: {log})")
        elif log:
            lines.append(f"    last {len(log)} lines of its log:")
            lines += [f"    | {line}" for line in log]
    lines += [f"  {step}" for step in next_steps]
    return "\n".join(lines)


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def status_table(state: JobState, events: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """`make status`'s report: the job's conditions with their times, one row per pod (phase,
    restarts, last exit code and reason), then the job's recent events."""
    lines = [f"{state.title}: {state.phase}"]
    if state.queue is not None:
        lines.append(f"Kueue: {queue_line(state.queue)}")
        if state.inadmissible:
            lines.append(f"  it cannot be admitted: {state.inadmissible}")
    if state.conditions:
        rows = [("CONDITION", "STATUS", "SINCE", "REASON", "MESSAGE")]
        rows += [(c.type, c.status, c.since, c.reason, c.message) for c in state.conditions]
        lines += _columns(rows)
    else:
        lines.append("(no conditions yet: the operator has not picked the job up)")
    lines.append("")
    if state.replicas:
        rows = [("POD", "TYPE", "PHASE", "RESTARTS", "EXIT CODE", "REASON")]
        rows += [
            (
                r.pod,
                r.replica_type,
                r.state,
                str(r.restarts),
                "" if r.exit_code is None else str(r.exit_code),
                r.reason,
            )
            for r in state.replicas
        ]
        lines += _columns(rows)
    else:
        lines.append("(no pods)")
    if events:
        lines += ["", "RECENT EVENTS"]
        rows = [
            (
                str(e.get("lastTimestamp") or e.get("eventTime") or ""),
                str(e.get("type", "")),
                str(e.get("reason", "")),
                " ".join(str(e.get("message", "")).split()),
            )
            for e in events
        ]
        lines += _columns(rows)
    return lines
