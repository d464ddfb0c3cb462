"""Resource hooks that make `pulumi up` wait for the training job's outcome (a PyTorchJob or a
TrainJob), and fail when it fails.

Why hooks: pulumi-kubernetes 4.25 applies a custom resource and then either returns at once or,
with `pulumi.com/waitFor`, waits until one given condition holds. It has no condition that fails
the wait: a job that fails while `pulumi up` waits for Running or Succeeded holds it until the
timeout and ends in "timed out", without the operator's reason. And it evaluates the same
condition after every update, so relabelling a finished job that never reached it hangs too. An
after-create/after-update hook runs inside `pulumi up` once the provider has applied the job: it
watches the job (readers/job_watch.py) and returns when the wanted condition holds, or,
within a second of the operator's Failed condition, with a report of what happened to each pod
(readers/job_state.py). Its messages are the job's diagnostics in the CLI's output; a failure
fails the program as soon as the job's registration completes (`JobOutcome.checked`), so
`pulumi up` exits non-zero with that report, while the job itself, which exists, stays recorded
in the state.

What the hooks do, per `job.waitFor` (none and created register none):
- after create (also the create of a replacement): wait until Running (`running`, Succeeded
  counts too) or Succeeded (`succeeded`); a job queued in Kueue (`job.queue`) is told as queued,
  with Kueue's reason, every 30 seconds until it is admitted, and fails at once when it can never
  be (readers/queue_state.py: its LocalQueue or ClusterQueue does not exist, or it asks for
  more than the whole quota); fail when the job fails first, or as soon as a pod's
  container cannot start (an image the node cannot pull with the stack's credential, a missing
  Secret: job_state.START_FAILURES), with the kubelet's message; `running` gives up after
  `job.runningTimeoutSeconds`, naming what each pod waits for (a pod the scheduler cannot place
  says why: the taint it does not tolerate, the node selector no node matches; a cluster's
  autoscaler may still add such a node, so that alone fails nothing sooner); `succeeded` waits as
  long as
  the job runs (its `activeDeadlineSeconds` ends it);
- after update: the provider updated the job in place, which only ever changes its metadata
  (a spec change replaces it), so a job that has finished is not run again and nothing is waited
  for: its outcome is stated (a failure as a warning) and `pulumi up` goes on. A job still
  running is waited for as after a create.
Hooks run on `pulumi up` only, never on a preview; Ctrl-C stops the waiting, not the job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi

from readers.job_state import JobState, Progress, failure_report, replica_line
from readers.job_watch import (
    PROGRESS_SECONDS,
    JobWatch,
    JobWatchError,
    TrainingProgress,
    WaitTimeoutError,
    api_errors,
)
from readers.queue_state import queue_line
from settings.stack import RUNNING_TIMEOUT_SECONDS

WAITING_MODES = ("running", "succeeded")
T = TypeVar("T")


class JobOutcomeError(RuntimeError):
    """The job failed, or did not get where `job.waitFor` wants it; the message says why."""


@dataclass(frozen=True)
class WaitTarget:
    """Which job to watch, on which cluster, for what."""

    namespace: str
    job: str
    kube_context: str | None
    wait_for: str  # running | succeeded
    stack: str
    kind: str = "PyTorchJob"  # the job's API kind
    running_timeout_seconds: int = RUNNING_TIMEOUT_SECONDS  # job.runningTimeoutSeconds
    rank0: str = ""  # rank 0's stable pod name: its log's progress is said while waiting

    @property
    def title(self) -> str:
        return f"{self.kind} {self.namespace}/{self.job}"

    def reached(self, state: JobState) -> bool:
        if state.outcome is not None:
            return True
        return self.wait_for == "running" and state.is_true("Running")

    def next_steps(self, urn: str) -> list[str]:
        return [
            f"conditions, pods and rank 0's log: make status STACK={self.stack}",
            "run it again: fix what failed (a change to the job's spec replaces it), or "
            f"without a change: pulumi up --stack {self.stack} --replace '{urn}'",
        ]


def duration(seconds: int) -> str:
    """`30 minutes`, `90 seconds`: whole minutes as minutes."""
    if seconds % 60 == 0:
        minutes = seconds // 60
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


class _Urn:
    """Stands for the job resource in `pulumi.log`, which reads only `.urn`: the resource's own
    URN output resolves only once its registration completes, after its hooks have run."""

    def __init__(self, urn: str) -> None:
        self.urn = pulumi.Output.from_input(urn)


class JobOutcome:
    """The job's after-create and after-update hook (`hook`)."""

    def __init__(self, name: str, target: WaitTarget) -> None:
        if target.wait_for not in WAITING_MODES:
            raise ValueError(f"job.waitFor {target.wait_for!r} waits for nothing")
        self.target = target
        self.failure: str | None = None
        self.hook = pulumi.ResourceHook(f"{name}-outcome", self._after)

    def checked(self, value: T) -> T:
        """`value`, or the program's failure when the hook found the job failed. Apply it to an
        output of the job (its URN resolves once its registration, hooks included, is done).

        Why the program fails rather than the hook: an after-hook's error fails the update, but
        the engine (3.260) then stops the Python program while it waits for its shutdown signal,
        and the language host prints that interruption's KeyboardInterrupt traceback after the
        error. A RunError from the program is printed as its one message, with no traceback, and
        fails `pulumi up` just the same; the job stays recorded in the state."""
        if self.failure is not None:
            raise pulumi.RunError(self.failure)
        return value

    async def _after(self, args: pulumi.ResourceHookArgs) -> None:
        loop = asyncio.get_running_loop()
        job: Any = _Urn(args.urn)

        def log(level: str, message: str) -> None:
            loop.call_soon_threadsafe(getattr(pulumi.log, level), message, job)

        # The Kubernetes client blocks: the watch runs in a thread, so the program's event loop
        # (other resources, the engine's callbacks) goes on meanwhile.
        try:
            await asyncio.to_thread(self.watch, args.urn, args.old_inputs is None, log)
        except JobOutcomeError as failure:
            self.failure = str(failure)  # raised by `checked` (see there why not here)

    def watch(self, urn: str, created: bool, log: Callable[[str, str], None]) -> JobState:
        """Wait as the module docstring says; `log(level, message)` reports progress."""
        target = self.target
        try:
            watch = JobWatch.connect(target.kube_context, target.namespace, target.job, target.kind)
            if not created:
                state = watch.state()
                if state is not None and state.outcome is not None:
                    finished = state.condition(state.outcome)
                    since = f" at {finished.since}" if finished is not None else ""
                    log(
                        "warn" if state.outcome == "Failed" else "info",
                        f"{target.title} finished earlier "
                        f"({state.outcome}{since}); an update of its metadata does not run it "
                        f"again (pulumi up --replace '{urn}' does)",
                    )
                    return state
            training = TrainingProgress(watch, target.rank0, lambda line: log("info", line))
            state = watch.wait(
                lambda state: (
                    target.reached(state)
                    or bool(state.replicas_that_cannot_start)
                    or state.inadmissible is not None
                ),
                timeout=target.running_timeout_seconds if target.wait_for == "running" else None,
                on_change=Progress(lambda line: log("info", line)),
                describe=Progress.key,
                every=(PROGRESS_SECONDS, training) if target.rank0 else None,
            )
            if target.rank0 and state.outcome is not None:
                training(state)  # the final figures, or that the script reported none
        except WaitTimeoutError as timeout:
            pods = [f"  {replica_line(r)}" for r in timeout.state.replicas] or ["  no pods"]
            if timeout.state.queue is not None:
                pods.insert(0, f"  {queue_line(timeout.state.queue)}")
            raise JobOutcomeError(
                "\n".join(
                    [
                        f"{target.title} did not reach Running "
                        f"within {duration(target.running_timeout_seconds)} "
                        f"(job.waitFor: running, job.runningTimeoutSeconds); it is "
                        f"{timeout.state.phase}:",
                        *pods,
                        *(f"  {step}" for step in target.next_steps(urn)[:1]),
                    ]
                )
            ) from None
        except (JobWatchError, *api_errors()) as error:
            raise JobOutcomeError(
                f"cannot watch {target.title} (job.waitFor: {target.wait_for}): {error}"
            ) from None
        if state.inadmissible is not None and not target.reached(state):
            raise JobOutcomeError(
                f"{target.title} cannot be admitted by Kueue (job.waitFor: "
                f"{target.wait_for}): {state.inadmissible}; the job stays created, suspended"
            )
        if not target.reached(state):
            raise JobOutcomeError(
                "\n".join(
                    [
                        f"{target.title}: a pod cannot start "
                        f"(job.waitFor: {target.wait_for}); the job stays created, and its pods "
                        "start once the cause is fixed:",
                        *(f"  {replica_line(r)}" for r in state.replicas_that_cannot_start),
                        *(f"  {step}" for step in target.next_steps(urn)[:1]),
                    ]
                )
            )
        if state.outcome == "Failed":
            logs = {r.pod: watch.log_tail(r) for r in state.failed_replicas}
            raise JobOutcomeError(failure_report(state, logs, next_steps=target.next_steps(urn)))
        return state
