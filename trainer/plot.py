"""``python -m trainer.plot DIR [--out FILE]``: render DIR/metrics.jsonl's loss curve to a PNG."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from trainer.metrics import METRICS_NAME, read_metrics


def loss_curve(directory: Path) -> tuple[list[int], list[float]]:
    """Epochs in order, each once, with its loss. The trainer rewinds the file on resume; an
    epoch logged twice anyway (a file from an older trainer) counts with its latest value."""
    rows = read_metrics(directory)
    if not rows:
        raise ValueError(f"{directory / METRICS_NAME} has no epochs yet")
    latest = {int(row["epoch"]): float(row["loss"]) for row in rows}
    epochs = sorted(latest)
    return epochs, [latest[epoch] for epoch in epochs]


def render(directory: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display in a pod or CI
    import matplotlib.pyplot as plt

    epochs, losses = loss_curve(directory)
    figure, axes = plt.subplots(figsize=(7, 4))
    # One line object: a single continuous curve, however many restarts wrote the file.
    axes.plot(epochs, losses, marker="." if len(epochs) < 50 else "")
    axes.set_xlabel("epoch")
    axes.set_ylabel("loss")
    axes.set_yscale("log" if min(losses) > 0 else "linear")
    axes.set_title(f"training loss ({directory})")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.plot", description=__doc__)
    parser.add_argument("directory", metavar="DIR", type=Path, help="checkpoint directory")
    parser.add_argument("--out", type=Path, help="PNG to write (default: DIR/loss.png)")
    args = parser.parse_args(argv)
    metrics = args.directory / METRICS_NAME
    if not metrics.is_file():
        print(f"error: {metrics} does not exist (has the trainer run?)", file=sys.stderr)
        return 1
    try:
        out = render(args.directory, args.out or args.directory / "loss.png")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
