"""tools/stack_cli.py: `--stack` and `--stack-dir` as every tool spells them, and a stack file
that cannot be read as its one error line (None, for the tool to exit 2)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from settings.stack import REPO_ROOT, load_stack_file
from tools.stack_cli import add_stack_arguments, stack_settings


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tool", exit_on_error=False)
    add_stack_arguments(parser)
    return parser


def test_the_stack_is_required_and_its_directory_defaults_to_the_repository(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parser().parse_args(["--stack", "dev"])
    assert (args.stack, args.stack_dir) == ("dev", REPO_ROOT)
    assert parser().parse_args(["--stack", "x", "--stack-dir", "/s"]).stack_dir == Path("/s")
    with pytest.raises(SystemExit) as usage:
        parser().parse_args([])
    assert usage.value.code == 2
    assert "--stack" in capsys.readouterr().err


def test_a_readable_stack_is_its_settings() -> None:
    args = parser().parse_args(["--stack", "dev"])
    assert stack_settings(args) == load_stack_file("dev", REPO_ROOT)


def test_an_unreadable_stack_is_one_error_line_and_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.bad.yaml").write_text("config:\n  pytorch-distributed:job:\n    nodes: 2\n")
    args = parser().parse_args(["--stack", "bad", "--stack-dir", str(tmp_path)])
    assert stack_settings(args) is None
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "image.repository" in err  # the key that is wrong, by name
