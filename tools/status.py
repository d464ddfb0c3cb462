"""Show a stack's training job on its cluster and follow it to its end (`make status STACK=...`).

    python -m tools.status --stack dev [--stack-dir DIR] [--no-follow] [--tail N]

Which job, where: the namespace and job name come from the stack file, the cluster from its
`kubeContext` in the kubeconfig the stack's Kubernetes provider reads (KUBECONFIG, else
~/.kube/config), never from a name typed by hand. It prints the job's conditions with their
times, one row per pod (phase, restarts, last exit code and reason), the job's recent events and
the training's progress (rank 0's last `@progress` report: readers/progress_report.py), then
follows the master's log, each line prefixed with the pod's name (a progress report in words),
until the job ends (a master pod the operator recreates is followed again). A node that serves no
logs gets the job's progress instead. Of a job that has already succeeded (what `make up` waits
for), the master's last lines are shown. The end is the job's outcome, in the words `pulumi up` uses
for it.

Exit codes: 0 the job succeeded, 1 it failed, 2 there is no such job (or the stack file, the
kubeconfig or the API server cannot be read: one line that says which and what to do), 3 it is
still running (`--no-follow`), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from builders.job_apis import api_of_settings
from readers.job_state import JobState, Progress, failure_report, progress_line, status_table
from readers.job_watch import JobWatch, JobWatchError, api_errors, describe_api_error
from readers.progress_report import ProgressReport, no_report, parse_line, summary
from settings.stack import SettingsError, load_stack_file
from tools.stack_cli import add_stack_arguments

SUCCEEDED, FAILED, NOT_FOUND, RUNNING, INTERRUPTED = 0, 1, 2, 3, 130


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.status",
        description="Show the stack's job (conditions, pods, events) and follow the "
        "master's log until the job ends. Exit code: 0 succeeded, 1 failed, 2 not found, "
        "3 still running (--no-follow).",
    )
    add_stack_arguments(parser)
    parser.add_argument("--no-follow", action="store_true", help="print the status once and exit")
    parser.add_argument(
        "--tail",
        type=int,
        default=50,
        metavar="N",
        help="lines of the master's log to show before following it (default 50; -1: all)",
    )
    return parser.parse_args(argv)


def outcome_code(state: JobState) -> int:
    return {"Succeeded": SUCCEEDED, "Failed": FAILED}.get(state.outcome or "", RUNNING)


class Follower:
    """Follows the master's log across recreations of its pod until the job ends."""

    def __init__(self, watch: JobWatch, master: str, out: TextIO) -> None:
        # `master`: rank 0's stable name (Replica.role; a JobSet pod's own name has a suffix).
        self.watch, self.master, self.out = watch, master, out
        self.pod = master  # the pod of the master being followed
        self.followed: set[str] = set()  # the master pods (uids) whose log was followed
        self.logs_served = True
        self.progress = Progress(self.say)

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _new_master(self, state: JobState) -> str | None:
        """The uid of a running master pod whose log has not been followed yet."""
        master = next((r for r in state.replicas if r.role == self.master), None)
        if master is None or master.phase != "Running" or master.uid in self.followed:
            return None
        self.pod = master.pod
        return master.uid

    def _worth_a_look(self, state: JobState) -> bool:
        return state.outcome is not None or (
            self.logs_served and self._new_master(state) is not None
        )

    def run(self, state: JobState, tail: int | None) -> JobState:
        while state.outcome is None:
            uid = self._new_master(state)
            if uid is None or not self.logs_served:
                state = self.watch.wait(
                    self._worth_a_look, on_change=self.progress, describe=Progress.key
                )
                continue
            self.followed.add(uid)
            try:
                for line in self.watch.follow_log(self.pod, tail=tail):
                    self.say(f"[{self.pod}] {readable(line)}")
            except api_errors() as error:
                self.logs_served = False
                reason = getattr(error, "reason", None) or error
                self.say(
                    f"(the log of {self.pod} is not available: {reason}; following the "
                    "job's progress instead)"
                )
            tail = None  # a recreated master's log is new: all of it
            state = self.watch.state() or state
        return state


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = parse_args(argv)
    watch = None
    try:
        settings = load_stack_file(args.stack, args.stack_dir)
        job = settings.job.name
        api = api_of_settings(settings)
        kind = api.kind
        watch = JobWatch.connect(settings.kube_context, settings.namespace, job, kind)
        state = watch.state()
        where = f" (context {settings.kube_context})" if settings.kube_context else ""
        if state is None:
            print(
                f"error: {kind} {settings.namespace}/{job} not found{where}: "
                f"`make up STACK={args.stack}` creates it",
                file=sys.stderr,
            )
            return NOT_FOUND
        print("\n".join(status_table(state, watch.events(state))), file=out, flush=True)
        # Rank 0's pod: the Master, an elastic job's worker-0, a TrainJob's node 0.
        said = progress_row(watch, state, api.rank0_pod(settings))
        if said:
            print(said, file=out, flush=True)
        tail = None if args.tail < 0 else args.tail
        if state.outcome is None and not args.no_follow:
            state = Follower(watch, api.rank0_pod(settings), out).run(state, tail)
        elif state.outcome == "Succeeded" and tail != 0:
            show_log_tail(watch, state, api.rank0_pod(settings), tail, out)
        return finish(watch, state, args.stack, out)
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return NOT_FOUND
    except JobWatchError as error:
        print(f"error: {error}", file=sys.stderr)
        return NOT_FOUND
    except api_errors() as error:
        print(f"error: {describe_api_error(error, watch.api if watch else None)}", file=sys.stderr)
        return NOT_FOUND
    except KeyboardInterrupt:
        return INTERRUPTED


def readable(line: str) -> str:
    """A log line as `make status` shows it: a progress report in words (ages as of the report:
    the line may be an old one), others as they are."""
    report = parse_line(line)
    return line if report is None else f"progress: {summary(report, report.time)}"


def progress_row(watch: JobWatch, state: JobState, rank0: str) -> str | None:
    """The table's last row: rank 0's latest progress (a finished job's final figures), or
    that its log has none; None when there is no log to read."""
    found = watch.rank0_progress(state, rank0)
    if isinstance(found, ProgressReport):
        return f"Progress: {summary(found)}"
    return None if found is True else f"Progress: {no_report()}"


def show_log_tail(
    watch: JobWatch, state: JobState, rank0: str, tail: int | None, out: TextIO
) -> None:
    """A job that has ended is not followed: rank 0's last `tail` lines (None: all), as the log
    is now, or why there is none (a deleted pod, a node that serves no logs)."""
    replica = next((r for r in state.replicas if r.role == rank0), None)
    if replica is None:
        return
    lines = watch.log_tail(replica, tail)
    if isinstance(lines, str):
        print(f"(the log of {replica.pod} is not available: {lines})", file=out, flush=True)
        return
    print("\n".join(f"[{replica.pod}] {readable(line)}" for line in lines), file=out, flush=True)


def finish(watch: JobWatch, state: JobState, stack: str, out: TextIO) -> int:
    """The last lines: the outcome, a failure in full; and the matching exit code."""
    if state.outcome == "Failed":
        logs = {r.pod: watch.log_tail(r) for r in state.failed_replicas}
        print(failure_report(state, logs), file=out, flush=True)
    elif state.outcome == "Succeeded":
        done = state.condition("Succeeded")
        since = f" at {done.since}" if done is not None else ""
        print(f"{state.title} succeeded{since}", file=out, flush=True)
    else:
        print(progress_line(state), file=out, flush=True)
    return outcome_code(state)


if __name__ == "__main__":
    sys.exit(main())
