"""``python -m trainer.launch [torchrun flags] -m trainer ...``: torchrun, with the trainer's exit
code as its own and no traceback of its own.

``torchrun`` itself (``torch.distributed.run``) exits 1 whenever a worker fails, whatever the
worker's code, and also when it is stopped by SIGTERM or SIGINT: its signal handler raises an
exception that ends in a Python traceback. In a pod that erases the difference a restart policy
needs (the training operator's ExitCode policy fails the job on 1-127 and recreates the pod on
128 and up): a preempted pod whose trainers committed a checkpoint and exited 143 would look
like a crash. So this runs torchrun's own argument parser and launcher unchanged and only
translates how they end:

* a worker failed: its exit code (the first failure's, as torchrun's report picks it, except
  that a rank which only lost its peer (EXIT_PEER_LOST) yields to another rank's failure; a
  worker killed by signal N gives 128 + N, like a shell), and a line for each failed worker naming
  its rank; when a worker ended on an unexpected exception (recorded by ``@record``), its line
  carries the exception's message, and the worker's own traceback is above it in the log;
* torchrun was stopped by a signal: it has forwarded the signal to the workers and waited for
  them (they commit a checkpoint and exit), so 128 + the signal, and no traceback.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run

from trainer.cli import EXIT_PEER_LOST

PREFIX = "trainer.launch:"


def worker_exit_code(exitcode: int) -> int:
    """A worker's return code as a container reports it: death by signal N (-N) is 128 + N."""
    return 128 - exitcode if exitcode < 0 else exitcode


def failure_lines(failure: ChildFailedError) -> tuple[list[str], int]:
    """One line per failed worker, by rank, and the code to exit with: the first failure's
    (torchrun's choice, by timestamps in whole seconds, so among workers that failed in the
    same second it is not necessarily the cause; hence a line for each)."""
    lines = []
    for rank, failed in sorted(failure.failures.items()):
        code = worker_exit_code(failed.exitcode)
        recorded = failed.error_file_data.get("message") if failed.error_file_data else None
        if isinstance(recorded, dict) and recorded.get("message"):
            # An exception the worker did not expect: its own traceback is in the log above.
            message = str(recorded["message"]).splitlines()[0]
            lines.append(f"error: trainer rank {rank} failed with exit code {code}: {message}")
        elif failed.exitcode < 0:
            lines.append(f"{PREFIX} trainer rank {rank} was killed by {failed.signal_name()}")
        else:  # it said why itself (rank 0 prints a refusal once), or it stopped on a signal
            lines.append(f"{PREFIX} trainer rank {rank} exited with code {code}")
    _, first = failure.get_first_failure()
    code = worker_exit_code(first.exitcode)
    if code == EXIT_PEER_LOST:
        # A rank that lost its peer is the effect; when a rank of this same torchrun failed
        # otherwise, that is the cause (a bug must fail the job, not look like a lost node).
        causes = (worker_exit_code(f.exitcode) for _, f in sorted(failure.failures.items()))
        code = next((other for other in causes if other != EXIT_PEER_LOST), code)
    return lines, code


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(list(argv) if argv is not None else sys.argv[1:])
    try:
        run(args)
    except ChildFailedError as failure:
        lines, code = failure_lines(failure)
        print("\n".join(lines), file=sys.stderr, flush=True)
        return code
    except SignalException as stop:
        # The workers got the signal from torchrun and have exited (or were killed after its
        # shutdown timeout); their own lines say whether a checkpoint was committed.
        code = 128 + int(stop.sigval)
        name = signal.Signals(stop.sigval).name
        print(f"{PREFIX} stopped by {name}; exit code {code}", file=sys.stderr, flush=True)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
