"""The stop agreement: a SIGTERM or SIGINT reaching any rank stops every rank after the same
step, so they all write (and wait for) the same checkpoint and none is left in a collective
its peers have abandoned. The training loop asks :meth:`StopAgreement.at_step` before every
step; nothing else in the trainer handles stop signals.
"""

from __future__ import annotations

import logging
import signal
import time
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from trainer.distributed import DistContext

LOG = logging.getLogger("trainer")


class StopAgreement:
    """SIGTERM/SIGINT set a local flag; ranks agree on it with a MAX all-reduce so every rank
    stops after the same step.

    The all-reduce is launched asynchronously at a check and read at the next one, so it
    overlaps training. How many steps lie between checks is recalibrated at every check so a
    check happens about every ``target_seconds``: a fixed step count is either a collective on
    every few tiny steps (a measurable share of a fast CPU step) or minutes between checks on a
    slow GPU step (past the pod's grace period). Each rank proposes an interval from its own
    step time and the same all-reduce carries the proposals (negated, so MAX picks the
    smallest); every rank reads the same reduced tensor, so all adopt the same interval at the
    same step and stay in lockstep. A stop therefore lands within about 2 x target_seconds.

    Steps are not all alike: an epoch's end and a checkpoint are slow work between two steps
    that an interval measured over plain steps does not foresee (an interval of hundreds of
    fast steps can span many slow saves). So the loop makes each of them a check point too
    (:meth:`check`): every rank reaches them after the same step, and a stop is never more
    than two of them away.
    """

    def __init__(
        self,
        ctx: DistContext,
        *,
        first_interval: int = 8,
        target_seconds: float = 0.25,
        max_interval: int = 10_000,
    ) -> None:
        self._device = ctx.device
        self._interval = first_interval
        self._target_seconds = target_seconds
        self._max_interval = max_interval
        self._steps_since_check = 0
        self._last_check = time.perf_counter()
        self.requested = False
        self.signum: int | None = None  # the first signal this rank received, if any
        self._pending: tuple[Any, torch.Tensor] | None = None

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.requested:
            LOG.warning("received %s: stopping after the current step", signal.Signals(signum).name)
            self.signum = signum
        self.requested = True

    def exit_code(self) -> int:
        """What a rank exits with after an agreed early stop: 128 + the signal, as a shell
        reports a signalled process. Ranks that were not signalled themselves (their peer's pod
        was preempted) report SIGTERM too: exiting 0 there would make the operator mark the
        whole job Succeeded with training unfinished, while a non-zero code makes
        `restartPolicy: OnFailure` restart the pod, which resumes from the checkpoint."""
        return 128 + (self.signum or signal.SIGTERM)

    def at_step(self) -> bool:
        """Call before every step on every rank; True means: stop now (same on all ranks)."""
        self._steps_since_check += 1
        if self._steps_since_check < self._interval:
            return False
        return self.check()

    def check(self) -> bool:
        """A check point: read the answer in flight (True: stop, the same on every rank) and
        put the question again. Every rank calls it at the same points."""
        agreed = self.drain()
        now = time.perf_counter()
        proposal = self._interval
        if self._steps_since_check:
            per_step = (now - self._last_check) / self._steps_since_check
            proposal = int(self._target_seconds / per_step) if per_step > 0 else self._max_interval
        proposal = min(max(proposal, 1), self._max_interval)
        message = torch.tensor(
            [int(self.requested), -proposal], dtype=torch.int64, device=self._device
        )
        self._pending = (dist.all_reduce(message, op=dist.ReduceOp.MAX, async_op=True), message)
        self._steps_since_check = 0
        self._last_check = now
        return agreed

    def drain(self) -> bool:
        """The answer of the all-reduce in flight (False if none); every rank calls it at the
        same points (a check, the end of an epoch), so every rank reads the same answer."""
        if self._pending is None:
            return False
        work, message = self._pending
        self._pending = None
        work.wait()
        stop, negated_interval = message.tolist()
        self._interval = -negated_interval
        return bool(stop)
