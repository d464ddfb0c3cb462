"""Run a job's replicas as local process trees with the PyTorchJob's lifecycle semantics.

What the training operator and the kubelet do on a cluster, done here for local processes:

* every replica ("pod") is its own session and process group, its output streamed line by line
  with the pod name as prefix;
* a replica that exits non-zero under restartPolicy OnFailure/Always is restarted in place (the
  kubelet restarts the container), after a delay like the kubelet's crash-loop backoff, and once
  its peers have stopped too (see `_regroup`: the one deliberate deviation);
* those restarts of all replicas share one counter and the job fails once it reaches
  backoffLimit (the operator's `PastBackoffLimit` sums the containers' restart counts; limit 0
  fails on the first failure);
* under restartPolicy ExitCode the operator gives the pod restartPolicy Never: an exit code of
  128-255 (a signal, e.g. preemption) makes it delete the failed pod and create a new one, whose
  container restart count starts at 0, so these recreations never reach backoffLimit (only
  activeDeadlineSeconds bounds them); any other non-zero code fails the job at once;
* the job succeeds when the success replica (the master) exits 0; the others get a little time
  to finish (they normally end with it), then are stopped like a deleted pod;
* an elastic job (`JobPolicy.elastic`, the operator's elasticPolicy) has no group to re-form:
  its torchrun agents re-rendezvous by themselves, so a failed replica is restarted alone while
  its peers go on, and the job succeeds when any replica succeeds (the operator's rule for a
  job of Workers only);
* a replica to be restarted stays pending while `<pid_dir>/<pod>.hold` exists, as a pod with no
  node to run on does (how a test or a user takes a node away for a while);
* SIGINT/SIGTERM are forwarded as SIGTERM to every replica (what a pod deletion sends), SIGKILL
  follows after terminationGracePeriodSeconds or on a second signal;
* nothing outlives the run: when a replica's main process exits, everything carrying its
  environment tag (see machine.procs) is killed, as a container's processes die with it, and a
  `finally` kills whatever any replica left plus the orphans we adopted as subreaper; if the
  supervisor itself is SIGKILLed, the kernel sends each replica's main process SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, TextIO

from machine import procs

# Every process a replica starts inherits this variable; see machine.procs.tagged.
REPLICA_TAG = "RUN_LOCAL_REPLICA"
# `<pid_dir>/<pod>.hold`: while it exists, that pod is not restarted (no node for it).
HOLD_SUFFIX = ".hold"
PATIENCE_SECONDS = 30.0
# Each replica starts through this exec shim, which asks the kernel to SIGTERM it when the
# supervisor dies (PR_SET_PDEATHSIG survives exec): even a runner killed with SIGKILL leaves no
# replica running. torchrun forwards that SIGTERM to its trainers, which checkpoint and exit.
_LAUNCHER = """\
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)
if os.getppid() != int(sys.argv[1]):
    sys.exit(143)
os.execvp(sys.argv[2], sys.argv[2:])
"""
RESTARTING_POLICIES = frozenset({"OnFailure", "Always", "ExitCode"})
KNOWN_POLICIES = RESTARTING_POLICIES | {"Never"}
# A line of a replica's output that reports an error: the trainer's and argparse's one-line
# refusals ("error: ...", "prog: error: ...") and the last line of a Python traceback
# ("ValueError: ..."). A failed run's summary quotes the failing replica's last one.
_ERROR_LINE = re.compile(r"(?:^|: )error: |^[A-Za-z_][\w.]*(?:Error|Exception): ")


@dataclass(frozen=True)
class ReplicaCommand:
    """One pod's container, as a local command."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    restart_policy: str = "OnFailure"
    # Run (best effort) whenever the replica's main process has exited and when the job ends:
    # removes what lives outside its process tree, such as its container
    # (tools/local_backends/container.py).
    teardown: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.restart_policy not in KNOWN_POLICIES:
            raise ValueError(
                f"restartPolicy of {self.name} is {self.restart_policy!r}; "
                f"allowed: {', '.join(sorted(KNOWN_POLICIES))}"
            )


@dataclass(frozen=True)
class JobPolicy:
    success_replica: str
    backoff_limit: int | None = None
    grace_seconds: float = 30.0
    active_deadline_seconds: float | None = None
    restart_delay_seconds: float = 1.0
    max_restart_delay_seconds: float = 10.0
    # How long a failed replica's peers may keep running before they are stopped so the group
    # can re-form (they normally fail by themselves within seconds: their collectives break).
    peer_exit_grace_seconds: float = 30.0
    # An elastic job: restarts do not wait for the peers, any replica's success is the job's.
    elastic: bool = False


@dataclass
class JobOutcome:
    status: str  # "Succeeded" | "Failed" | "Interrupted"
    reason: str
    restarts: dict[str, int]
    exit_code: int
    wall_seconds: float = 0.0
    recreations: dict[str, int] = field(default_factory=dict)  # ExitCode: pods replaced
    failed_replica: str | None = None  # the replica whose exit failed the job
    last_errors: dict[str, str] = field(default_factory=dict)  # replica -> its last error line
    exit_codes: dict[str, int] = field(default_factory=dict)  # replica -> its last exit code
    signal_name: str | None = None  # Interrupted: the signal the supervisor received

    def last_error(self) -> tuple[str, str] | None:
        """(replica, line): the failing replica's last error line, else the latest any replica
        printed (a refusal is printed once, by rank 0's replica, whichever exited first)."""
        if self.failed_replica in self.last_errors:
            return self.failed_replica, self.last_errors[self.failed_replica]
        return next(iter(reversed(self.last_errors.items())), None)


@dataclass
class _Replica:
    command: ReplicaCommand
    process: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    restarts: int = 0
    recreations: int = 0
    state: str = "pending"  # pending | running | waiting | succeeded | failed
    restart_at: float = 0.0
    sessions: list[int] = field(default_factory=list)
    stopped_for_regroup: bool = False
    exit_code: int | None = None
    held: bool = False  # said once that it is pending on its hold file


def container_exit_code(returncode: int) -> int:
    """Popen reports death by signal N as -N; a container reports 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    def __init__(
        self,
        replicas: Sequence[ReplicaCommand],
        policy: JobPolicy,
        *,
        out: TextIO | None = None,
        pid_dir: Path | None = None,
        label: str = "run_local",
    ) -> None:
        names = [r.name for r in replicas]
        if policy.success_replica not in names:
            raise ValueError(f"success replica {policy.success_replica!r} is not in {names}")
        self._replicas = [_Replica(command) for command in replicas]
        self._policy = policy
        self._out = out if out is not None else sys.stdout
        self._pid_dir = pid_dir
        self._label = label
        self._lock = threading.Lock()
        self._signals: list[int] = []
        self._last_errors: dict[str, str] = {}
        self._total_restarts = 0
        self._children_before: set[int] = set()
        self._run_token = uuid.uuid4().hex[:12]
        # Set while a failed replica waits for its peers: when to stop them, when to kill them.
        self._regroup_stop_at: float | None = None
        self._regroup_kill_at: float | None = None

    # -- output -------------------------------------------------------------------------------

    def _emit(self, prefix: str, text: str) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._out.write(f"[{prefix}] {text}\n")
            self._out.flush()

    def say(self, text: str) -> None:
        self._emit(self._label, text)

    def _stream(self, name: str, pipe: IO[bytes]) -> None:
        for raw in iter(pipe.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            if _ERROR_LINE.search(line):
                with self._lock:
                    # Re-inserted, so the dictionary's order is the order of the latest errors.
                    self._last_errors.pop(name, None)
                    self._last_errors[name] = line.strip()
            self._emit(name, line)
        with contextlib.suppress(OSError):
            pipe.close()

    # -- replica lifecycle --------------------------------------------------------------------

    def _start(self, replica: _Replica) -> None:
        command = replica.command
        process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(os.getpid()), *command.argv],
            env={**command.env, REPLICA_TAG: self._tag(replica)},
            cwd=command.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        replica.process = process
        replica.sessions.append(process.pid)
        replica.state = "running"
        replica.reader = threading.Thread(
            target=self._stream, args=(command.name, process.stdout), daemon=True
        )
        replica.reader.start()
        self._write_pid(command.name, process.pid)

    def _tag(self, replica: _Replica) -> str:
        return f"{self._run_token}/{replica.command.name}"

    def _kill_tree(self, replica: _Replica) -> None:
        """SIGKILL everything the replica started, like a container's processes when it dies."""
        for session in replica.sessions:
            procs.signal_session(session, signal.SIGKILL)
        # Twice: a process forked while the first pass ran is caught by the second.
        for _ in range(2):
            procs.signal_pids(procs.tagged(REPLICA_TAG, self._tag(replica)), signal.SIGKILL)

    def _teardown(self, replica: _Replica) -> None:
        command = replica.command
        if not command.teardown or replica.process is None:
            return
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                list(command.teardown),
                env=dict(command.env),
                cwd=command.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
                check=False,
            )

    def _write_pid(self, name: str, pid: int) -> None:
        # Tests and users find a replica's process group here; written atomically.
        if self._pid_dir is None:
            return
        self._pid_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._pid_dir / f".{name}.pid.tmp"
        tmp.write_text(f"{pid}\n")
        tmp.replace(self._pid_dir / f"{name}.pid")

    def _finish_exit(self, replica: _Replica) -> int:
        """The main process has exited: tear down its session like a container's, return code."""
        assert replica.process is not None
        returncode = replica.process.wait()
        self._kill_tree(replica)
        self._teardown(replica)
        if replica.reader is not None:
            replica.reader.join(timeout=5)
        replica.exit_code = container_exit_code(returncode)
        return replica.exit_code

    def _restart_delay(self, replica: _Replica) -> float:
        delay = self._policy.restart_delay_seconds * (2 ** max(replica.restarts - 1, 0))
        return min(delay, self._policy.max_restart_delay_seconds)

    def _backoff_exceeded(self) -> bool:
        limit = self._policy.backoff_limit
        if limit is None:
            return False
        return self._total_restarts > 0 if limit == 0 else self._total_restarts >= limit

    def _on_exit(self, replica: _Replica, code: int) -> JobOutcome | None:
        name = replica.command.name
        if replica.stopped_for_regroup:
            # We stopped it so the group can re-form: a restart whatever its exit code says.
            replica.stopped_for_regroup = False
            code = code or 143
        if code == 0:
            replica.state = "succeeded"
            self.say(f"{name} succeeded")
            if name == self._policy.success_replica or self._policy.elastic:
                return self._outcome("Succeeded", f"{name} succeeded", 0)
            return None
        policy = replica.command.restart_policy
        if policy == "ExitCode":
            return self._on_exit_code_policy(replica, code)
        if policy not in {"OnFailure", "Always"}:
            replica.state = "failed"
            return self._outcome(
                "Failed",
                f"{name} failed with exit code {code} (restartPolicy {policy})",
                1,
                failed=name,
            )
        self._total_restarts += 1
        replica.restarts += 1
        if self._backoff_exceeded():
            replica.state = "failed"
            return self._outcome(
                "Failed",
                f"{name} failed with exit code {code}; the job's restarts reached "
                f"backoffLimit {self._policy.backoff_limit}",
                1,
                failed=name,
            )
        delay = self._restart_delay(replica)
        replica.state = "waiting"
        replica.restart_at = time.monotonic() + delay
        limit = self._policy.backoff_limit
        self.say(
            f"{name} exited with code {code}; restarting it in {delay:.0f}s "
            f"(job restart {self._total_restarts}"
            + (f" of backoffLimit {limit})" if limit is not None else ")")
        )
        self._wait_for_peers(name)
        return None

    def _on_exit_code_policy(self, replica: _Replica, code: int) -> JobOutcome | None:
        name = replica.command.name
        if code < 128:
            replica.state = "failed"
            return self._outcome(
                "Failed",
                f"{name} failed with exit code {code}, which restartPolicy ExitCode does not "
                "retry (only 128-255, a process ended by a signal)",
                1,
                failed=name,
            )
        replica.recreations += 1
        replica.state = "waiting"
        # A new pod: no crash-loop back-off, only the time to schedule and start it.
        replica.restart_at = time.monotonic() + self._policy.restart_delay_seconds
        self.say(
            f"{name} exited with code {code}; restartPolicy ExitCode: the pod is deleted and "
            f"recreated (recreation {replica.recreations}, not counted against backoffLimit)"
        )
        self._wait_for_peers(name)
        return None

    def _wait_for_peers(self, name: str) -> None:
        if self._policy.elastic:
            return  # the agents re-form the group themselves, with the peers still running
        peers = self._running()
        if peers:
            if self._regroup_stop_at is None:
                self._regroup_stop_at = time.monotonic() + self._policy.peer_exit_grace_seconds
            self.say(
                f"{name} waits until {', '.join(p.command.name for p in peers)} has stopped too: "
                "the static rendezvous re-forms only as a whole group"
            )

    def _regroup(self) -> None:
        """Restart waiting replicas together, once no replica of the old group still runs.

        torchrun's static rendezvous cannot take back a single restarted node: a replica that
        comes back while a peer of the old group still runs may join that peer's dying store
        and hang. On a cluster the peers fail within seconds and the kubelet's back-off usually
        hides the race; here the restart simply waits for them, and stops peers that linger.
        """
        waiting = [r for r in self._replicas if r.state == "waiting"]
        if not waiting or any(self._held(r) for r in waiting):
            return
        now = time.monotonic()
        running = self._running()
        if running:
            if self._regroup_stop_at is not None and now >= self._regroup_stop_at:
                self._regroup_stop_at = None
                self._regroup_kill_at = now + self._policy.grace_seconds
                for peer in running:
                    self.say(f"stopping {peer.command.name} so the group can re-form")
                    peer.stopped_for_regroup = True
                    procs.signal_session(peer.sessions[-1], signal.SIGTERM)
            if self._regroup_kill_at is not None and now >= self._regroup_kill_at:
                self._regroup_kill_at = None
                for peer in running:
                    self.say(f"killing {peer.command.name}")
                    self._kill_tree(peer)
            return
        self._regroup_stop_at = self._regroup_kill_at = None
        if all(now >= r.restart_at for r in waiting):
            for replica in waiting:
                self.say(f"restarting {replica.command.name}")
                self._start(replica)

    def _held(self, replica: _Replica) -> bool:
        """True while the replica's hold file exists: its pod is pending, with no node to run on."""
        name = replica.command.name
        hold = self._pid_dir / f"{name}{HOLD_SUFFIX}" if self._pid_dir is not None else None
        if hold is None or not hold.exists():
            if replica.held:
                replica.held = False
                self.say(f"{name}: {hold} is gone, the pod can start")
            return False
        if not replica.held:
            replica.held = True
            self.say(f"{name} stays pending while {hold} exists (no node for it)")
        return True

    def _restart_elastic(self) -> None:
        """An elastic job: each waiting replica starts when its delay is over and it is not held;
        its agent joins the running group's next rendezvous."""
        now = time.monotonic()
        for replica in self._replicas:
            if replica.state == "waiting" and now >= replica.restart_at and not self._held(replica):
                self.say(f"restarting {replica.command.name}; it joins the next rendezvous")
                self._start(replica)

    def _outcome(
        self, status: str, reason: str, exit_code: int, *, failed: str | None = None
    ) -> JobOutcome:
        return JobOutcome(
            status=status,
            reason=reason,
            restarts={r.command.name: r.restarts for r in self._replicas},
            exit_code=exit_code,
            recreations={r.command.name: r.recreations for r in self._replicas},
            failed_replica=failed,
        )

    # -- stopping -----------------------------------------------------------------------------

    def _running(self) -> list[_Replica]:
        return [r for r in self._replicas if r.state == "running"]

    def _reap_finished(self) -> None:
        for replica in self._running():
            assert replica.process is not None
            if replica.process.poll() is not None:
                code = self._finish_exit(replica)
                replica.state = "succeeded" if code == 0 else "failed"
                self.say(f"{replica.command.name} exited with code {code}")

    def _wait_running(self, seconds: float, *, stop_on_signal: bool) -> None:
        deadline = time.monotonic() + seconds
        seen = len(self._signals)
        while self._running() and time.monotonic() < deadline:
            if stop_on_signal and len(self._signals) > seen:
                return
            time.sleep(0.1)
            self._reap_finished()

    def _stop_all(self, *, patient: bool) -> None:
        """Stop every replica still running: optionally let them finish, then SIGTERM, SIGKILL."""
        for replica in self._replicas:
            if replica.state == "waiting":
                replica.state = "failed"  # a pending restart is cancelled
        grace = self._policy.grace_seconds
        if patient and self._running():
            # Workers normally finish with the master; one that does not is not waited on long.
            self._wait_running(min(grace, PATIENCE_SECONDS), stop_on_signal=True)
        if self._running():
            names = ", ".join(r.command.name for r in self._running())
            self.say(f"sending SIGTERM to {names}; SIGKILL in {grace:.0f}s (Ctrl-C again: now)")
            for replica in self._running():
                procs.signal_session(replica.sessions[-1], signal.SIGTERM)
            self._wait_running(grace, stop_on_signal=True)
        for replica in self._running():
            self.say(f"killing {replica.command.name}")
            self._kill_tree(replica)
        self._wait_running(10, stop_on_signal=False)

    def _kill_everything(self) -> None:
        """Last line of defence: nothing we started may outlive us, whatever went wrong."""
        for replica in self._replicas:
            self._kill_tree(replica)
            if replica.process is not None and replica.process.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    replica.process.wait(timeout=5)
        # Orphans that left their session were adopted by us (subreaper): kill what is new.
        strays = set(procs.descendants(os.getpid())) - self._children_before
        procs.signal_pids(strays, signal.SIGKILL)
        time.sleep(0.05 if strays else 0)
        procs.reap_adopted(skip=self._children_before)
        for replica in self._replicas:
            self._teardown(replica)
            if replica.reader is not None:
                replica.reader.join(timeout=2)
            if self._pid_dir is not None:
                (self._pid_dir / f"{replica.command.name}.pid").unlink(missing_ok=True)

    # -- main loop ----------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals.append(signum)
        if len(self._signals) > 1:
            # A second Ctrl-C: no more patience.
            for replica in self._replicas:
                self._kill_tree(replica)

    def _supervise(self) -> JobOutcome:
        started = time.monotonic()
        deadline = self._policy.active_deadline_seconds
        for replica in self._replicas:
            self._start(replica)
        while True:
            if self._signals:
                name = signal.Signals(self._signals[0]).name
                self.say(f"{name} received: stopping every replica")
                self._stop_all(patient=False)
                outcome = self._outcome("Interrupted", f"{name} received", 128 + self._signals[0])
                outcome.signal_name = name
                return outcome
            if deadline is not None and time.monotonic() - started >= deadline:
                self.say(f"activeDeadlineSeconds {deadline:g} passed: stopping every replica")
                self._stop_all(patient=False)
                return self._outcome("Failed", f"activeDeadlineSeconds {deadline:g} passed", 1)
            procs.reap_adopted(
                skip=[r.process.pid for r in self._replicas if r.process is not None]
            )
            for replica in self._running():
                assert replica.process is not None
                if replica.process.poll() is None:
                    continue
                outcome = self._on_exit(replica, self._finish_exit(replica))
                if outcome is not None:
                    self._stop_all(patient=outcome.status == "Succeeded")
                    return outcome
            if self._policy.elastic:
                self._restart_elastic()
            else:
                self._regroup()
            time.sleep(0.1)

    def run(self) -> JobOutcome:
        started = time.monotonic()
        procs.become_subreaper()
        self._children_before = set(procs.descendants(os.getpid()))
        in_main_thread = threading.current_thread() is threading.main_thread()
        previous = {}
        if in_main_thread:
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._on_signal)
        try:
            outcome = self._supervise()
        finally:
            self._kill_everything()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        outcome.wall_seconds = time.monotonic() - started
        with self._lock:  # the readers have been joined; this is their last word
            outcome.last_errors = dict(self._last_errors)
        outcome.exit_codes = {
            r.command.name: r.exit_code for r in self._replicas if r.exit_code is not None
        }
        return outcome
