"""Stand-in for a training replica, used to test the supervisor: behaviour chosen by flags.

Records its own pid (and any helper it starts) under --pid-dir so a test can check that nothing
survives the run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SLEEPER = "import time\nwhile True: time.sleep(0.2)\n"


def count_run(state: Path) -> int:
    runs = int(state.read_text()) + 1 if state.exists() else 1
    state.write_text(str(runs))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--pid-dir", type=Path, required=True)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds before exiting")
    parser.add_argument("--forever", action="store_true", help="run until signalled")
    parser.add_argument("--exit", type=int, default=0, dest="exit_code")
    parser.add_argument("--fail-runs", type=int, default=0, help="fail the first N runs")
    parser.add_argument("--fail-code", type=int, default=1, help="exit code of a failing run")
    parser.add_argument("--forever-runs", type=int, default=0, help="--forever on the first N")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--grandchild", action="store_true", help="start a helper process")
    parser.add_argument("--escapee", action="store_true", help="start a helper in a new session")
    parser.add_argument("--say", action="append", default=[], help="print this line first")
    parser.add_argument("--after", help="go on only once this replica has said its lines")
    args = parser.parse_args()

    args.pid_dir.mkdir(parents=True, exist_ok=True)
    runs = count_run(args.pid_dir / f"{args.name}.runs")
    (args.pid_dir / f"{args.name}.{runs}.{os.getpid()}.pid").touch()
    if args.grandchild or args.escapee:
        helper = subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=args.escapee)
        (args.pid_dir / f"{args.name}.helper.{helper.pid}.pid").touch()

    def on_term(signum: int, _frame: object) -> None:
        print(f"{args.name} got {signal.Signals(signum).name}", flush=True)
        if not args.ignore_term:
            sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    print(f"{args.name} run {runs} started", flush=True)
    for line in args.say:
        print(line, flush=True)
    (args.pid_dir / f"{args.name}.ready").touch()
    while args.after and not (args.pid_dir / f"{args.after}.ready").exists():
        time.sleep(0.05)
    if runs <= args.fail_runs:
        time.sleep(args.sleep)
        print(f"{args.name} run {runs} fails", flush=True)
        return args.fail_code
    if args.forever or runs <= args.forever_runs:
        while True:
            time.sleep(0.1)
    time.sleep(args.sleep)
    print(f"{args.name} run {runs} exits {args.exit_code}", flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
