"""``python -m trainer.plot ROOT [--out FILE] [--title TEXT]``: draw a run from its metrics.jsonl to
a PNG (the run's root: its checkpoint directory, or its URL on another storage backend).

The picture: the loss per epoch (log scale when every loss is positive) over the samples per
second, both on one epoch axis; a marker on the loss curve at each epoch during which a
checkpoint was saved, and a dashed vertical line where a process resumed from a checkpoint (a
restart: after a failure, a preemption or a stop). The curve is one line whatever the restarts:
the trainer rewinds the file on resume, so each epoch is there once. Rows written before the
trainer recorded saves and restarts draw without them. ``python -m tools.plot_run --stack NAME``
(``make plot``) finds a stack's run and calls :func:`render`."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.metrics import METRICS_NAME, read_metrics
from trainer.storage import StorageRoot, open_storage

if TYPE_CHECKING:  # matplotlib is imported when a picture is drawn, never by the trainer
    from matplotlib.figure import Figure

PLOT_NAME = "loss.png"
# The artists' gids, which say what each line of the figure is (the tests read them).
LOSS, SAVES, RESTART, THROUGHPUT = "loss", "saves", "restart", "samples_per_s"


@dataclass(frozen=True)
class RunHistory:
    """A run's epochs in order, each once, with what the picture shows of them."""

    epochs: list[int]
    losses: list[float]
    samples_per_s: list[float]  # NaN where a row has none
    saved: list[int]  # the epochs during which at least one checkpoint was saved
    saves: list[int]  # how many, per epoch of `saved`
    resumed: list[int]  # the epochs whose row is the first of a process that resumed


def run_history(root: StorageRoot) -> RunHistory:
    """The run's rows, each epoch once. The trainer rewinds the file on resume; an epoch logged
    twice anyway (a file from an older trainer) counts with its latest row. ValueError when the
    file has no epoch yet; FileNotFoundError when there is none."""
    storage = open_storage(root)
    rows = read_metrics(storage)
    latest: dict[int, dict[str, Any]] = {}
    for row in rows:
        if isinstance(row, dict) and "epoch" in row and "loss" in row:
            latest[int(row["epoch"])] = row
    if not latest:
        raise ValueError(f"{storage.location_of(METRICS_NAME)} has no epochs yet")
    epochs = sorted(latest)
    ordered = [latest[epoch] for epoch in epochs]
    saved = [epoch for epoch in epochs if latest[epoch].get("saves")]
    return RunHistory(
        epochs=epochs,
        losses=[float(row["loss"]) for row in ordered],
        samples_per_s=[_number(row.get("samples_per_s")) for row in ordered],
        saved=saved,
        saves=[_count(latest[epoch]["saves"]) for epoch in saved],
        resumed=[epoch for epoch in epochs if latest[epoch].get("resumed") is True],
    )


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _count(saves: object) -> int:
    """A row's saves: a list of steps (this trainer's), or a plain count."""
    if isinstance(saves, list | tuple):
        return len(saves)
    return int(saves) if isinstance(saves, int | float) else 0


def loss_curve(root: StorageRoot) -> tuple[list[int], list[float]]:
    """Epochs in order, each once, with its loss (see :func:`run_history`)."""
    history = run_history(root)
    return history.epochs, history.losses


def draw(history: RunHistory, title: str) -> Figure:
    """The run's picture: loss above, samples per second below, one epoch axis; saves marked on
    the loss curve, a restart as a dashed line on both at the epochs completed when it resumed.
    Every artist has a gid (LOSS, SAVES, RESTART, THROUGHPUT)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 6))
    FigureCanvasAgg(figure)  # Agg: no display in a pod or CI, and no pyplot state
    loss_axes, speed_axes = figure.subplots(
        2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    epochs = history.epochs
    marker = "." if len(epochs) < 50 else ""
    # One line object: a single continuous curve, however many restarts wrote the file.
    loss_axes.plot(epochs, history.losses, marker=marker, label="loss", gid=LOSS)
    finite = [loss for loss in history.losses if math.isfinite(loss)]
    loss_axes.set_yscale("log" if finite and min(finite) > 0 else "linear")
    loss_axes.set_ylabel("loss")
    if history.saved:
        by_epoch = dict(zip(epochs, history.losses, strict=True))
        total = sum(history.saves)
        loss_axes.plot(
            history.saved,
            [by_epoch[epoch] for epoch in history.saved],
            linestyle="none",
            marker="v",
            markersize=7,
            color="tab:green",
            label=f"checkpoint saved ({total} in all)",
            gid=SAVES,
        )
    speed_axes.plot(
        epochs,
        history.samples_per_s,
        marker=marker,
        color="tab:orange",
        label="samples/s",
        gid=THROUGHPUT,
    )
    speed_axes.set_ylabel("samples/s")
    speed_axes.set_xlabel("epoch")
    if all(math.isnan(value) for value in history.samples_per_s):
        speed_axes.text(
            0.5, 0.5, "no samples/s recorded", transform=speed_axes.transAxes, ha="center"
        )
    # A resumed process's first row is the epoch after its checkpoint: the line is drawn at the
    # epochs completed when it started (a mid-epoch checkpoint's epoch begins there too).
    for index, epoch in enumerate(history.resumed):
        for axes in (loss_axes, speed_axes):
            axes.axvline(
                epoch - 1,
                linestyle="--",
                color="tab:red",
                alpha=0.7,
                label="restart (resumed from a checkpoint)"
                if index == 0 and axes is loss_axes
                else None,
                gid=RESTART,
            )
    for axes in (loss_axes, speed_axes):
        axes.grid(True, alpha=0.3)
    loss_axes.legend(loc="upper right", fontsize="small")
    loss_axes.set_title(title, fontsize="medium")
    figure.tight_layout()
    return figure


def render(root: StorageRoot, out: Path, *, title: str | None = None) -> Path:
    """Draw the run at ``root`` (see :func:`draw`) to the PNG ``out``; the title names the run
    (``title``, or the root's location)."""
    storage = open_storage(root)
    figure = draw(run_history(storage), title or f"run {storage.location}")
    figure.savefig(out, dpi=100)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.plot", description=__doc__)
    parser.add_argument(
        "root", metavar="ROOT", help="the run's checkpoint directory (or its storage URL)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"PNG to write (default: ROOT/{PLOT_NAME}, or ./{PLOT_NAME} for a root that is "
        "not a directory here)",
    )
    parser.add_argument("--title", help="the picture's title (default: the run's root)")
    args = parser.parse_args(argv)
    try:
        storage = open_storage(args.root)
        if not storage.exists(METRICS_NAME):
            print(
                f"error: {storage.location_of(METRICS_NAME)} does not exist (has the trainer run?)",
                file=sys.stderr,
            )
            return 1
        out = args.out or (storage.local_directory() or Path()) / PLOT_NAME
        render(storage, out, title=args.title)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
