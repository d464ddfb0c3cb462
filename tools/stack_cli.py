"""Command-line arguments shared by every tool that reads a stack file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from settings.stack import REPO_ROOT, SettingsError, StackSettings, load_stack_file


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """`--stack` and `--stack-dir`, spelled the same in `tools.render` and `tools.run_local`."""
    parser.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument(
        "--stack-dir",
        type=Path,
        default=REPO_ROOT,
        help="directory holding Pulumi.<stack>.yaml (default: the repository root)",
    )


def stack_settings(args: argparse.Namespace) -> StackSettings | None:
    """The settings of `--stack` in `--stack-dir`; None, its one error line printed, for a stack
    file that cannot be read (the command then exits 2, as on any usage error)."""
    try:
        return load_stack_file(args.stack, args.stack_dir)
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return None
