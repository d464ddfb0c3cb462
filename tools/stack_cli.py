"""Command-line arguments shared by every tool that reads a stack file."""

from __future__ import annotations

import argparse
from pathlib import Path

from components.settings import REPO_ROOT


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """`--stack` and `--stack-dir`, spelled the same in `tools.render` and `tools.run_local`."""
    parser.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument(
        "--stack-dir",
        type=Path,
        default=REPO_ROOT,
        help="directory holding Pulumi.<stack>.yaml (default: the repository root)",
    )
