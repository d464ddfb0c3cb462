"""``python -m trainer.plot DIR`` renders the loss curve of a real run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.trainer.conftest import run_module


def run_plot(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("trainer.plot", *args)


def test_renders_a_png_from_the_metrics(reference_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "loss.png"
    done = run_plot(str(reference_run), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 5000  # a drawn curve, not an empty canvas


def test_a_directory_without_metrics_is_a_clear_error(tmp_path: Path) -> None:
    done = run_plot(str(tmp_path))
    assert done.returncode == 1
    assert "metrics.jsonl does not exist" in done.stderr
