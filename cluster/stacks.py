"""Which stacks run on the one-machine cluster: every stack whose `kubeContext` is the context of
the cluster's kubeconfig, whatever its name (`local`, a copy of it for your own code, the
digits example's `digits-local`). For those, `make preview|up|destroy|status|checkpoint|config`
run with the cluster's kubeconfig, Docker API, tools and registry password, starting it when
needed (`python -m cluster run`); other stacks run with the user's own.

    python3 -m cluster.stacks STACK [--registry-port PORT]

prints `cluster` for a stack of the cluster and nothing for another; for another stack that
names the cluster's registry (`127.0.0.1:PORT`, e.g. a copy of Pulumi.local.yaml whose
`kubeContext` was changed or dropped), it also says so in one line on stderr, since its image
would then go to a registry only this machine reaches. Exit code 0 either way: a stack without a
file is the Pulumi wrapper's to refuse.

Standard library only: `make` asks this with the system's `python3` before any virtual
environment exists, to know whether preview, up and destroy need a Pulumi CLI of the user's own
(the cluster brings one). A Pulumi stack file keeps each key of the project as one
`<project>:<key>:` entry under `config:`, so the key's line is found without a YAML parser;
tests/cluster/test_stacks.py holds it to the program's own reading of every stack file.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

# The kubeconfig's context (and cluster) name of the one-machine cluster.
CONTEXT = "pytorch-distributed-local"
DEFAULT_REGISTRY_PORT = 5000
ROOT = Path(__file__).resolve().parents[1]
# `  pytorch-distributed:kubeContext: NAME`, the value plain or quoted, a comment after it.
KUBE_CONTEXT = re.compile(
    r"""^\s+pytorch-distributed:kubeContext:\s*(?:"([^"]*)"|'([^']*)'|([^\s#'"]+))\s*(?:\#.*)?$""",
    re.MULTILINE,
)
COMMENT = re.compile(r"(^|\s)#.*$")


def stack_file(stack: str, directory: Path = ROOT) -> Path:
    return directory / f"Pulumi.{stack}.yaml"


def kube_context(text: str) -> str | None:
    """The `kubeContext` a stack file's text sets, or None."""
    match = KUBE_CONTEXT.search(text)
    if match is None:
        return None
    return next(group for group in match.groups() if group is not None)


def registry_address(port: int = DEFAULT_REGISTRY_PORT) -> str:
    return f"127.0.0.1:{port}"


def names_registry(text: str, port: int = DEFAULT_REGISTRY_PORT) -> bool:
    """Whether a value of the stack file (not a comment) names the cluster's registry."""
    address = re.compile(rf"(?<![\w.])(127\.0\.0\.1|localhost):{port}(?!\d)")
    return any(address.search(COMMENT.sub("", line)) for line in text.splitlines())


def stack_text(stack: str, directory: Path = ROOT) -> str | None:
    """The stack file's text, None when there is none."""
    try:
        return stack_file(stack, directory).read_text(encoding="utf-8")
    except OSError:
        return None


def on_cluster(stack: str, directory: Path = ROOT) -> bool:
    """The stack's file exists and its `kubeContext` is the one-machine cluster's."""
    text = stack_text(stack, directory)
    return text is not None and kube_context(text) == CONTEXT


def registry_notice(stack: str, port: int, directory: Path = ROOT) -> str | None:
    """One line for a stack that names the cluster's registry but runs on another context."""
    text = stack_text(stack, directory)
    return None if text is None else notice_of(stack, text, port)


def notice_of(stack: str, text: str, port: int) -> str | None:
    """registry_notice of a stack file's `text`."""
    context = kube_context(text)
    if context == CONTEXT or not names_registry(text, port):
        return None
    where = f"kubeContext {context}" if context else "no kubeContext (KUBECONFIG's current one)"
    return (
        f"note: stack {stack} names the one-machine cluster's registry {registry_address(port)} "
        f"but runs on {where}, not the cluster: `make` gives it your own kubeconfig, Docker "
        f"engine and Pulumi CLI; for the cluster set kubeContext: {CONTEXT} (as "
        "Pulumi.local.yaml does)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m cluster.stacks", description=__doc__)
    parser.add_argument("stack")
    parser.add_argument("--registry-port", type=int, default=DEFAULT_REGISTRY_PORT)
    parser.add_argument("--dir", type=Path, default=ROOT, help="where the stack files are")
    args = parser.parse_args(argv)
    text = stack_text(args.stack, args.dir)
    if text is None:
        return 0
    if kube_context(text) == CONTEXT:
        print("cluster")
        return 0
    notice = notice_of(args.stack, text, args.registry_port)
    if notice is not None:
        print(notice, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
