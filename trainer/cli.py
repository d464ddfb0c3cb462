"""Command line: the tutorial's shape (``[--batch_size B] TOTAL_EPOCHS SAVE_EVERY``) plus the
flags a fault-tolerant run needs, validated into a frozen :class:`TrainConfig`.

Validation happens here, before any directory or process group exists, so a bad value never
leaves anything behind and every rank reports the same argparse error naming the flag.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TASK = "trainer.task:regression_task"


@dataclass(frozen=True)
class TrainConfig:
    total_epochs: int
    save_every: int
    batch_size: int = 32
    checkpoint_dir: Path = Path("/checkpoints")
    seed: int = 0
    dataset_size: int = 2048
    keep: int = 2
    task: str = DEFAULT_TASK
    pg_timeout: float = 300.0
    init_from: Path | None = None
    init_optimizer: bool = False

    def semantic_config(self) -> dict[str, object]:
        """What a checkpoint must agree with to be resumed.

        TOTAL_EPOCHS, SAVE_EVERY, --keep and --pg-timeout are left out on purpose: they change
        how long or how often we train/save, not what one training step computes, so a finished
        run may be extended with more epochs or saved more often. --init-from is left out too:
        it only seeds a fresh run's weights, and the run's own checkpoints record it.
        """
        return {
            "task": self.task,
            "batch_size": self.batch_size,
            "dataset_size": self.dataset_size,
            "seed": self.seed,
        }

    def fingerprint(self) -> str:
        encoded = json.dumps(self.semantic_config(), sort_keys=True).encode()
        return hashlib.sha256(encoded).hexdigest()[:16]


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer >= {minimum} ({what}), got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be an integer >= {minimum} ({what}), got {value}"
            )
        return value

    return parse


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an integer in [0, 2**63), got {text!r}"
        ) from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**63), got {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {value}")
    return value


def _task_spec(text: str) -> str:
    # Imported lazily so `--help` and the other validators stay cheap.
    from trainer.task import TaskLoadError, load_task_factory

    try:
        load_task_factory(text)
    except TaskLoadError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _checkpoint_dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    return path


def _init_source(text: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(
            f"{text!r} does not exist; expected a checkpoint file or a checkpoint directory "
            "of an earlier run"
        )
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Fault-tolerant, resumable DDP trainer (run it under torchrun).",
    )
    parser.add_argument(
        "total_epochs",
        metavar="TOTAL_EPOCHS",
        type=_int_at_least(1, "epochs to train in total"),
        help="total epochs to train (a resumed run continues up to this count)",
    )
    parser.add_argument(
        "save_every",
        metavar="SAVE_EVERY",
        type=_int_at_least(1, "save every N completed epochs"),
        help="write a checkpoint after every N completed epochs (the last epoch is always saved)",
    )
    parser.add_argument(
        "--batch_size",
        "--batch-size",
        dest="batch_size",
        type=_int_at_least(1, "samples per rank per step"),
        default=32,
        help="input batch size on each rank (default: 32)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=_checkpoint_dir,
        default=Path("/checkpoints"),
        help="shared directory for checkpoints and metrics (default: /checkpoints)",
    )
    parser.add_argument(
        "--seed", type=_seed, default=0, help="seed for model init and data (default: 0)"
    )
    parser.add_argument(
        "--dataset-size",
        type=_int_at_least(1, "samples in the dataset"),
        default=2048,
        help="samples in the generated dataset (default: 2048)",
    )
    parser.add_argument(
        "--keep",
        type=_int_at_least(2, "checkpoints kept so a corrupt newest one has a fallback"),
        default=2,
        help="number of committed checkpoints to keep, at least 2 (default: 2)",
    )
    parser.add_argument(
        "--task",
        type=_task_spec,
        default=DEFAULT_TASK,
        help=f"MODULE:FUNCTION building the model, data and optimizer (default: {DEFAULT_TASK})",
    )
    parser.add_argument(
        "--pg-timeout",
        type=_positive_seconds,
        default=300.0,
        help="process-group timeout in seconds, bounds any hang (default: 300)",
    )
    parser.add_argument(
        "--init-from",
        type=_init_source,
        metavar="PATH",
        help="warm start: a new run (its own --checkpoint-dir) begins from the model weights of "
        "this checkpoint file, or of the newest verified checkpoint in this directory; a run "
        "that already has checkpoints of its own resumes them instead",
    )
    parser.add_argument(
        "--init-optimizer",
        action="store_true",
        help="with --init-from: also load the optimizer state (its shapes must match)",
    )
    return parser


def parse_config(argv: Sequence[str] | None = None) -> TrainConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.init_optimizer and args.init_from is None:
        parser.error("--init-optimizer needs --init-from PATH (the run to take it from)")
    if args.init_from is not None:
        source, own = args.init_from.resolve(), args.checkpoint_dir.resolve()
        if source == own or own in source.parents:
            parser.error(
                f"argument --init-from: {str(args.init_from)!r} is inside this run's "
                f"--checkpoint-dir {str(args.checkpoint_dir)!r}; a warm start writes to a new "
                "directory, so pass another --checkpoint-dir"
            )
    return TrainConfig(
        total_epochs=args.total_epochs,
        save_every=args.save_every,
        batch_size=args.batch_size,
        checkpoint_dir=args.checkpoint_dir,
        seed=args.seed,
        dataset_size=args.dataset_size,
        keep=args.keep,
        task=args.task,
        pg_timeout=args.pg_timeout,
        init_from=args.init_from,
        init_optimizer=args.init_optimizer,
    )
