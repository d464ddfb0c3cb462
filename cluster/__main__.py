"""`python -m cluster up|status|down|env|run`: the one-machine cluster (cluster/
service.py) as `make cluster`, `make cluster-status` and `make cluster-down` run it.

    up       start it in the background unless it runs; print what to export to use it
    status   what runs and whether each part answers (exit 0 all of it, 1 otherwise)
    down     stop it and check that nothing of it is left (exit 1 if something is)
    env      the export line for this shell (nothing while it is not running, exit 1)
    run -- CMD...   start it unless it runs, then CMD with its kubeconfig, Docker API and tools
                    (what `make up|preview|destroy` do for a stack of the cluster, one whose
                    kubeContext is its context: cluster/stacks.py); `--no-start`: exit 2
                    when it is not running, for `make status|checkpoint`; `--tools-only`: CMD
                    with only its tools on PATH, running or not, for `make config`

Exit code 2 and one line for a machine it cannot run on (not Linux, not root, cgroup v2), 1 and
one line for a start that failed (the log it names says more).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cluster.service import (
    REGISTRY_PORT,
    STATE_DIR,
    ClusterDir,
    ClusterError,
    Running,
    checks,
    down,
    ensure_base_image,
    ensure_tools,
    running,
    serve,
    up,
    with_tools,
)
from cluster.stacks import CONTEXT

COMPONENTS = (
    "control plane (etcd, API server, controller manager, scheduler), training operator, "
    "Kubeflow Trainer and JobSet, Kueue (LocalQueue local), "
    "real node (kubelet, containerd, CoreDNS, NetworkPolicy agent)"
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m cluster", description=__doc__)
    parser.add_argument(
        "--dir", type=Path, default=STATE_DIR, help="its state and logs (default: .cluster/)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start it in the background unless it runs")
    start.add_argument("--registry-port", type=int, default=REGISTRY_PORT)
    commands.add_parser("status", help="what runs and whether it answers")
    commands.add_parser("down", help="stop it; nothing of it is left")
    commands.add_parser("env", help="the export line for this shell")
    command = commands.add_parser("run", help="start it unless it runs, then run a command on it")
    command.add_argument("--registry-port", type=int, default=REGISTRY_PORT)
    mode = command.add_mutually_exclusive_group()
    mode.add_argument(
        "--no-start", action="store_true", help="fail (exit 2) when it is not running"
    )
    mode.add_argument(
        "--tools-only",
        action="store_true",
        help="only its tools (the Pulumi CLI) on PATH; nothing is started",
    )
    command.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    supervise = commands.add_parser("serve", help=argparse.SUPPRESS)
    supervise.add_argument("--registry-port", type=int, required=True)
    return parser.parse_args(argv)


def describe(current: Running, directory: ClusterDir) -> str:
    return "\n".join(
        [
            f"  {COMPONENTS}",
            f"  registry {current.registry}, user {current.registry_user}, password in "
            f"{directory.relative(current.registry_password_file)}",
            f"  podman's Docker API {current.docker_host}; state and logs in "
            f"{directory.relative(directory.path)}/",
            f"`make up` of a stack with kubeContext: {CONTEXT} (STACK=local, your copy of it) "
            "uses it as it is; to use it from this shell (pulumi, make preview|up STACK=dev):",
            f"  {current.exports()}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    directory = ClusterDir(args.dir.resolve())
    try:
        if args.command == "serve":
            return serve(directory, args.registry_port)
        if args.command == "up":
            current, started = up(directory, args.registry_port)
            state = "is up" if started else "was already up"
            print(f"the one-machine cluster {state}:\n{describe(current, directory)}")
            return 0
        if args.command == "run":
            command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not command:
                print("usage: python -m cluster run -- CMD [ARGS...]", file=sys.stderr)
                return 2
            if args.tools_only:
                environment = with_tools(dict(os.environ), ensure_tools())
                os.execvpe(command[0], command, environment)
            if args.no_start and running(directory) is None:
                print(
                    "error: the one-machine cluster is not running: `make cluster` (or `make "
                    "up` of the stack) starts it",
                    file=sys.stderr,
                )
                return 2
            current, started = up(directory, args.registry_port)
            if not started:
                ensure_base_image()  # a rebuild of the base image since drops its `local` tag
            if started:
                print(
                    "make: the one-machine cluster is up (it keeps running: `make cluster-down` "
                    "stops it)",
                    file=sys.stderr,
                    flush=True,
                )
            os.execvpe(command[0], command, current.environment(dict(os.environ)))
        current = running(directory)
        if args.command == "env":
            if current is None:
                print("the one-machine cluster is not running: `make cluster`", file=sys.stderr)
                return 1
            print(current.exports())
            return 0
        if args.command == "status":
            return status(current, directory)
        was_running, left = down(directory)
        if left:
            print("the one-machine cluster stopped, but these are left:", file=sys.stderr)
            print("\n".join(f"  {item}" for item in left), file=sys.stderr)
            return 1
        where = directory.relative(directory.path)
        print(
            f"the one-machine cluster is down: no process, mount, network namespace or cgroup "
            f"of it is left (its logs and its registry's images stay in {where}/; remove it "
            "to reclaim the space)"
            if was_running
            else "the one-machine cluster is not running; nothing of it is left"
        )
        return 0
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(
            "interrupted: a cluster being started goes on starting in the background "
            "(`make cluster-status` shows it, `make cluster-down` stops it)",
            file=sys.stderr,
        )
        return 130


def status(current: Running | None, directory: ClusterDir) -> int:
    if current is None:
        print("the one-machine cluster is not running: `make cluster` starts it")
        return 1
    print(f"the one-machine cluster is up (supervisor pid {current.supervisor}):")
    results = checks(current)
    for what, ok in results:
        print(f"  {'ok  ' if ok else 'DOWN'}  {what}")
    print(f"  {current.exports()}")
    if not all(ok for _, ok in results):
        print(
            f"a part does not answer: its log is in {directory.relative(directory.plane)}/; "
            "`make cluster-down` then `make cluster` starts afresh"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
