"""Draw a stack's run to a PNG (`make plot`): the loss, the samples per second, the epochs with a
checkpoint saved and the restarts (trainer/plot.py draws it), from wherever the run is.

    python -m tools.plot_run --stack dev [--root ROOT] [--out FILE]

Where the run is, unless `--root` says:
* a stack with `checkpoints.storage: s3`: its bucket, `s3://<bucket>[/<prefix>]/<job.name>`
  (settings.checkpoint_dir), read from this machine with the stack's endpoint and region (unless
  AWS_ENDPOINT_URL_S3 and AWS_DEFAULT_REGION say otherwise here) and this environment's
  credentials, as `make checkpoint` reads it; the cluster's run and `make local`'s alike;
* a stack of a claim: what `make checkpoint` copied from the claim
  (`.checkpoints/<stack>-retrieved`), or what `make local` trained here
  (`.checkpoints/<stack>/<job.name>`); with both, the one whose metrics.jsonl is newer, and the
  command says which it drew.

`--root` names the run: its directory or URL (`make checkpoint OUT=DIR`'s DIR), or a checkpoint
root that holds it in `<job.name>/` (`make local CHECKPOINT_ROOT=...`'s directory or URL). The
picture goes to `--out` (default `.checkpoints/<stack>-run.png`).

Exit codes: 0 drawn; 1 no run there yet, or it cannot be read (one line naming what is missing and
what to run); 2 the stack file cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from settings.stack import REPO_ROOT, StackSettings
from settings.values import S3_ENDPOINT_ENV
from tools.retrieve import bucket_client_environment
from tools.stack_cli import add_stack_arguments, stack_settings

CHECKPOINTS_DIR = ".checkpoints"


class PlotRunError(Exception):
    """No run to draw: one line naming what is missing and what to run."""


@dataclass(frozen=True)
class Run:
    root: str  # the run's root, as trainer.plot takes it: a directory or a URL
    source: str  # where it came from, in words ("make checkpoint's copy", ...)


def retrieved_dir(stack: str, repo_root: Path = REPO_ROOT) -> Path:
    """Where `make checkpoint` copies the stack's run by default (tools/retrieve.py)."""
    return repo_root / CHECKPOINTS_DIR / f"{stack}-retrieved"


def local_run_dir(settings: StackSettings, stack: str, repo_root: Path = REPO_ROOT) -> Path | None:
    """Where `make local` trains the stack's run by default (tools/run_local.py: the claim's
    mountPath is `.checkpoints/<stack>`); None for a storage that is not a claim."""
    mount_path = settings.checkpoints.backend.mount_path(settings.checkpoints)
    if mount_path is None:
        return None
    relative = settings.checkpoint_dir[len(mount_path) :].lstrip("/")
    return repo_root / CHECKPOINTS_DIR / stack / relative


def _has_metrics(root: str) -> bool:
    from trainer.metrics import METRICS_NAME
    from trainer.storage import open_storage

    storage = open_storage(root)
    try:
        return storage.exists(METRICS_NAME)
    except OSError as error:
        hint = ""
        if storage.local_directory() is None:
            hint = (
                f" (it is read from here with this environment's credentials at {S3_ENDPOINT_ENV}"
                ", else the stack's checkpoints.endpoint; or copy the run with make checkpoint "
                "and name the copy with ROOT=DIR)"
            )
        where = storage.location_of(METRICS_NAME)
        said = str(error) if where in str(error) else f"{where}: {error}"
        raise PlotRunError(f"cannot read {said}{hint}") from None


def _metrics_of(directory: Path) -> Path:
    from trainer.metrics import METRICS_NAME

    return directory / METRICS_NAME


def find_run(
    settings: StackSettings, stack: str, *, root: str | None = None, repo_root: Path = REPO_ROOT
) -> Run:
    """The root of the stack's run to draw (see the module's docstring). Reads the bucket of an
    s3 stack, so call it inside `bucket_client_environment(settings)`."""
    from trainer.metrics import METRICS_NAME

    job = settings.job.name
    if root is not None:
        inner = f"{root.rstrip('/')}/{job}"
        if _has_metrics(root):
            return Run(root, "--root")
        if _has_metrics(inner):
            return Run(inner, f"--root's {job}/")
        raise PlotRunError(
            f"{root.rstrip('/')}/{METRICS_NAME} does not exist (nor {inner}/{METRICS_NAME}): "
            "ROOT names the run's directory or URL, where the trainer writes its checkpoints"
        )
    checkpoints = settings.checkpoints
    if checkpoints.backend.mount_path(checkpoints) is None:
        url = settings.checkpoint_dir
        if _has_metrics(url):
            return Run(url, f"the stack's {checkpoints.storage}")
        raise PlotRunError(
            f"{url}/{METRICS_NAME} does not exist: no epoch of job {job} has ended yet "
            f"(make up STACK={stack}, or make local STACK={stack}, trains it)"
        )
    retrieved = retrieved_dir(stack, repo_root)
    local = local_run_dir(settings, stack, repo_root)
    found = [
        (directory, source)
        for directory, source in (
            (retrieved, "make checkpoint's copy"),
            (local, "make local's run"),
        )
        if directory is not None and _metrics_of(directory).is_file()
    ]
    if not found:
        local_hint = (
            f", or make local STACK={stack} (it trains in {_shown(local, repo_root)})"
            if local is not None
            else ""
        )
        raise PlotRunError(
            f"no run of stack {stack} here: {_shown(retrieved, repo_root)}/{METRICS_NAME} does "
            f"not exist; run make checkpoint STACK={stack} first (it copies the cluster's run "
            f"there){local_hint}, or name the run with ROOT=DIR|URL"
        )
    directory, source = max(found, key=lambda item: _metrics_of(item[0]).stat().st_mtime)
    return Run(str(directory), source)


def _shown(path: Path, repo_root: Path) -> Path:
    """A path in the checkout as `make` is run from there: relative."""
    return path.relative_to(repo_root) if path.is_relative_to(repo_root) else path


def default_out(stack: str, repo_root: Path = REPO_ROOT) -> Path:
    return repo_root / CHECKPOINTS_DIR / f"{stack}-run.png"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.plot_run",
        description="Draw a stack's run (loss, samples/s, checkpoint saves, restarts) to a PNG.",
    )
    add_stack_arguments(parser)
    parser.add_argument(
        "--root",
        help="the run's directory or URL (default: the stack's bucket, or what make checkpoint "
        "or make local left in .checkpoints/)",
    )
    parser.add_argument(
        "--out", type=Path, help="the PNG to write (default: .checkpoints/<stack>-run.png)"
    )
    args = parser.parse_args(argv)
    settings = stack_settings(args)
    if settings is None:
        return 2
    from trainer.plot import render

    out = args.out or default_out(args.stack, REPO_ROOT)
    try:
        with bucket_client_environment(settings):
            run = find_run(settings, args.stack, root=args.root, repo_root=REPO_ROOT)
            out.parent.mkdir(parents=True, exist_ok=True)
            title = f"stack {args.stack}: job {settings.job.name} ({run.root})"
            render(run.root, out, title=title)
    except (PlotRunError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{out}: stack {args.stack}'s run from {run.source}, {run.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
