"""``python -m trainer.plot DIR`` draws a run: the loss curve of a real run, and the saves,
restarts and samples per second that the rows record (rows from before those fields too)."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from tests.trainer.conftest import run_module
from trainer.metrics import METRICS_NAME, MetricsLog, rewind
from trainer.plot import LOSS, RESTART, SAVES, THROUGHPUT, draw, render, run_history


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


# -- the picture: loss, samples/s, saves and restarts, from rows old and new ----------------------


def write_rows(directory: Path, rows: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (directory / METRICS_NAME).write_text(text)
    return directory


def old_row(epoch: int, loss: float, samples_per_s: float = 1000.0) -> dict[str, Any]:
    """A row as the trainer wrote it before it recorded saves and restarts."""
    return {
        "epoch": epoch,
        "total_epochs": 10,
        "loss": loss,
        "samples": 256,
        "seconds": 0.25,
        "samples_per_s": samples_per_s,
        "eta_s": 1.0,
        "lr": 0.1,
    }


def lines(axes: Axes, gid: str) -> list[Line2D]:
    return [line for line in axes.get_lines() if line.get_gid() == gid]


def interrupted_run(directory: Path) -> Path:
    """Six epochs, saving after epochs 2 and 4 (and mid-epoch 3), killed after epoch 5's row;
    resumed from epoch 4's checkpoint, trained to 8, saving after 6 and 8: what the loop
    records, through MetricsLog and the resume's rewind."""
    directory.mkdir(parents=True)  # the trainer's checkpoint directory, made before any row
    first = MetricsLog(directory, 8, 0)
    for epoch in range(1, 6):
        saves = {2: [16], 3: [8], 4: [16]}.get(epoch, [])
        first.record(epoch, 2.0 / epoch, 256, 0.5, 0.1, saves=saves)
    assert rewind(directory, 4) == 1  # epoch 5, trained after the checkpoint it resumes
    second = MetricsLog(directory, 8, 4)
    for epoch in range(5, 9):
        saves = [16] if epoch in (6, 8) else []
        second.record(epoch, 2.0 / epoch, 256, 0.25, 0.1, saves=saves, resumed=epoch == 5)
    return directory


def test_a_run_with_saves_and_a_restart_draws_them_on_one_curve(tmp_path: Path) -> None:
    history = run_history(interrupted_run(tmp_path / "run"))
    assert history.epochs == list(range(1, 9))
    assert history.saved == [2, 3, 4, 6, 8] and history.resumed == [5]

    figure = draw(history, "stack dev: job ddp-dev")
    loss_axes, speed_axes = figure.axes
    (loss,) = lines(loss_axes, LOSS)  # one continuous curve across the restart
    assert list(loss.get_xdata()) == list(range(1, 9))
    assert list(loss.get_ydata()) == [2.0 / epoch for epoch in range(1, 9)]
    assert loss_axes.get_yscale() == "log"
    (saves,) = lines(loss_axes, SAVES)
    assert list(saves.get_xdata()) == [2, 3, 4, 6, 8]
    assert list(saves.get_ydata()) == [2.0 / epoch for epoch in (2, 3, 4, 6, 8)]
    # The restart is where the resumed process started: after epoch 4's checkpoint, both panels.
    for axes in (loss_axes, speed_axes):
        (restart,) = lines(axes, RESTART)
        assert list(restart.get_xdata()) == [4, 4]
        assert restart.get_linestyle() == "--"
    (speed,) = lines(speed_axes, THROUGHPUT)
    assert list(speed.get_ydata()) == [512.0] * 4 + [1024.0] * 4
    assert speed_axes.get_shared_x_axes().joined(loss_axes, speed_axes)
    legend = loss_axes.get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()] == [
        "loss",
        "checkpoint saved (5 in all)",
        "restart (resumed from a checkpoint)",
    ]
    assert loss_axes.get_title() == "stack dev: job ddp-dev"


def test_the_png_of_a_run_with_saves_and_a_restart(tmp_path: Path) -> None:
    root = interrupted_run(tmp_path / "run")
    out = render(root, tmp_path / "run.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20000  # two drawn panels, not an empty canvas


def test_rows_without_saves_and_restarts_still_draw(tmp_path: Path) -> None:
    root = write_rows(tmp_path / "old", [old_row(epoch, 1.0 / epoch) for epoch in range(1, 6)])
    history = run_history(root)
    assert (history.saved, history.resumed) == ([], [])
    figure = draw(history, "old")
    loss_axes, speed_axes = figure.axes
    assert len(lines(loss_axes, LOSS)) == 1 and len(lines(speed_axes, THROUGHPUT)) == 1
    assert not lines(loss_axes, SAVES) and not lines(loss_axes, RESTART)
    assert not lines(speed_axes, RESTART)
    done = run_plot(str(root), "--out", str(tmp_path / "old.png"), "--title", "an old run")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "old.png").stat().st_size > 5000


def test_a_row_with_only_epoch_and_loss_draws_without_throughput(tmp_path: Path) -> None:
    root = write_rows(tmp_path / "bare", [{"epoch": 1, "loss": 0.0}, {"epoch": 2, "loss": -1.0}])
    figure = draw(run_history(root), "bare")
    loss_axes, speed_axes = figure.axes
    assert loss_axes.get_yscale() == "linear"  # a loss that is not positive has no log scale
    (speed,) = lines(speed_axes, THROUGHPUT)
    assert all(math.isnan(value) for value in speed.get_ydata())
    assert [text.get_text() for text in speed_axes.texts] == ["no samples/s recorded"]


def test_an_epoch_logged_twice_counts_with_its_latest_row(tmp_path: Path) -> None:
    """A file from a trainer before the rewind: the later row of epoch 2 is the restart's."""
    rows = [old_row(1, 1.0), old_row(2, 0.9), {**old_row(2, 0.5), "resumed": True, "saves": 1}]
    history = run_history(write_rows(tmp_path / "twice", rows))
    assert history.epochs == [1, 2] and history.losses == [1.0, 0.5]
    assert (history.saved, history.saves, history.resumed) == ([2], [1], [2])
