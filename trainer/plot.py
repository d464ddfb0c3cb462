"""``python -m trainer.plot ROOT [--out FILE]``: render a run's metrics.jsonl loss curve to a
PNG (the run's root: its checkpoint directory, or its URL on another storage backend)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from trainer.metrics import METRICS_NAME, read_metrics
from trainer.storage import StorageRoot, open_storage

PLOT_NAME = "loss.png"


def loss_curve(root: StorageRoot) -> tuple[list[int], list[float]]:
    """Epochs in order, each once, with its loss. The trainer rewinds the file on resume; an
    epoch logged twice anyway (a file from an older trainer) counts with its latest value."""
    storage = open_storage(root)
    rows = read_metrics(storage)
    if not rows:
        raise ValueError(f"{storage.location_of(METRICS_NAME)} has no epochs yet")
    latest = {int(row["epoch"]): float(row["loss"]) for row in rows}
    epochs = sorted(latest)
    return epochs, [latest[epoch] for epoch in epochs]


def render(root: StorageRoot, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display in a pod or CI
    import matplotlib.pyplot as plt

    storage = open_storage(root)
    epochs, losses = loss_curve(storage)
    figure, axes = plt.subplots(figsize=(7, 4))
    # One line object: a single continuous curve, however many restarts wrote the file.
    axes.plot(epochs, losses, marker="." if len(epochs) < 50 else "")
    axes.set_xlabel("epoch")
    axes.set_ylabel("loss")
    axes.set_yscale("log" if min(losses) > 0 else "linear")
    axes.set_title(f"training loss ({storage.location})")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)
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
        render(storage, out)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
