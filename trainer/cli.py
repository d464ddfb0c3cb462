"""Command line: the tutorial's shape (``[--batch_size B] TOTAL_EPOCHS SAVE_EVERY``) plus the
flags a fault-tolerant run needs, validated into a frozen :class:`TrainConfig`.

Each option is declared once, on its :class:`TrainConfig` field (default, validator, help, flag
names); the parser is built from the fields, so a new option cannot be added to one and
forgotten in the other. Validation happens here, before any directory or process group exists,
so a bad value never leaves anything behind and every rank reports the same argparse error
naming the flag.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NoReturn

from trainer.storage import locate, open_storage

DEFAULT_TASK = "trainer.task:regression_task"
# Exit codes of `python -m trainer`, kept by `trainer.launch` as the container's, for the training
# operator's ExitCode restart policy (1-127 fail the job, 128 and up recreate the pod) and the
# local runner: 0 trained to the end (or nothing was left to train); 1 an unexpected error, with
# its traceback; EXIT_REFUSED the arguments, or a checkpoint directory of another run, cannot
# work, and a retry fails the same way; 128 + N stopped by signal N with a checkpoint committed,
# so a restart resumes it; EXIT_PEER_LOST a collective failed because another rank is gone (its
# pod deleted, preempted or killed, its node lost): the run itself is sound, and once the pods
# are recreated it resumes from the last checkpoint. (readers/job_state.py says what each
# code means in `pulumi up`'s errors and `make status`.)
EXIT_REFUSED = 2
EXIT_PEER_LOST = 200
DEFAULT_PG_TIMEOUT_S = 300.0
# How the model is spread over the ranks (trainer.parallelism): replicated (DDP) or sharded
# (FSDP2, with sharded checkpoints). settings/values.py's Parallelism is held to this.
PARALLELISMS = ("ddp", "fsdp")


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


class UsageError(ValueError):
    """The command line cannot run: one line naming the argument, the value and what is
    allowed. ``field``: the :class:`TrainConfig` field at fault, when one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def _parallelism(text: str) -> str:
    if text not in PARALLELISMS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(PARALLELISMS)}, got {text!r}")
    return text


def _checkpoint_dir(text: str) -> str:
    """The root's spelling; whether it can be used is asked once every flag is known
    (``--create-bucket`` changes the answer for a bucket that does not exist yet)."""
    try:
        open_storage(text)
    except OSError as error:  # an unknown scheme, a malformed URL
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _refuse_unusable_root(root: str, create_bucket: bool) -> None:
    """The checkpoint root named on the command line can take a run's objects (nothing is
    created here: a bucket that ``--create-bucket`` will make is fine as it is)."""
    try:
        problem = open_storage(root).refusal(create_bucket=create_bucket)
    except OSError as error:  # a storage that cannot be asked
        problem = f"cannot be reached: {error}"
    if problem is not None:
        raise UsageError(f"argument --checkpoint-dir: {root!r} {problem}", "checkpoint_dir")


def _init_source(text: str) -> str:
    try:
        found = locate(text)
    except OSError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} does not exist; expected a checkpoint file or a checkpoint directory "
            "of an earlier run"
        )
    return text


@dataclass(frozen=True)
class Option:
    """How a :class:`TrainConfig` field is spelled on the command line. ``flags``: the names of
    an optional argument (default ``--field-name``); ``positional``: an argument in the
    tutorial's order instead, shown as FIELD_NAME. ``help`` may use ``%(default)s``."""

    help: str
    type: Callable[[str], Any] | None = None
    flags: tuple[str, ...] = ()
    positional: bool = False
    metavar: str | None = None
    action: str | None = None


def _cli(help: str, **spelling: Any) -> dict[str, Option]:
    return {"option": Option(help, **spelling)}


@dataclass(frozen=True)
class TrainConfig:
    total_epochs: int = field(
        metadata=_cli(
            "total epochs to train (a resumed run continues up to this count)",
            type=_int_at_least(1, "epochs to train in total"),
            positional=True,
        )
    )
    save_every: int = field(
        metadata=_cli(
            "write a checkpoint after every N completed epochs (the last epoch is always saved)",
            type=_int_at_least(1, "save every N completed epochs"),
            positional=True,
        )
    )
    batch_size: int = field(
        default=32,
        metadata=_cli(
            "input batch size on each rank (default: %(default)s); on fewer ranks than the run "
            "started with, the most samples a rank puts through the model at once",
            type=_int_at_least(1, "samples per rank per step"),
            flags=("--batch_size", "--batch-size"),  # the tutorial's spelling first
        ),
    )
    global_batch_size: int | None = field(
        default=None,
        metadata=_cli(
            "samples per optimizer step over all ranks, fixed for the whole run (default: "
            "--batch_size times the world size the run starts with); a resume on any number "
            "of ranks keeps it, accumulating gradients where a rank's share exceeds --batch_size",
            type=_int_at_least(1, "samples per optimizer step over all ranks"),
            metavar="N",
        ),
    )
    save_every_steps: int | None = field(
        default=None,
        metadata=_cli(
            "also write a checkpoint after every N optimizer steps (counted from the start of "
            "training, so mid-epoch too); default: at epoch ends only",
            type=_int_at_least(1, "save every N optimizer steps"),
            metavar="N",
        ),
    )
    checkpoint_dir: str = field(
        default="/checkpoints",
        metadata=_cli(
            "the run's root for checkpoints and metrics: a shared directory, or the URL of "
            "another storage backend (default: %(default)s)",
            type=_checkpoint_dir,
        ),
    )
    create_bucket: bool = field(
        default=False,
        metadata=_cli(
            "object storage: create the bucket --checkpoint-dir is in when it does not exist "
            "(default: a missing bucket is refused, so a mistyped name never starts a run "
            "nobody finds)",
            action="store_true",
        ),
    )
    seed: int = field(
        default=0, metadata=_cli("seed for model init and data (default: %(default)s)", type=_seed)
    )
    dataset_size: int = field(
        default=2048,
        metadata=_cli(
            "samples in the generated dataset (default: %(default)s)",
            type=_int_at_least(1, "samples in the dataset"),
        ),
    )
    keep: int = field(
        default=2,
        metadata=_cli(
            "number of committed checkpoints to keep, at least 2 (default: %(default)s)",
            type=_int_at_least(2, "checkpoints kept so a corrupt newest one has a fallback"),
        ),
    )
    task: str = field(
        default=DEFAULT_TASK,
        metadata=_cli(
            "MODULE:FUNCTION building the model, data and optimizer (default: %(default)s)",
            type=_task_spec,
        ),
    )
    pg_timeout: float = field(
        default=DEFAULT_PG_TIMEOUT_S,
        metadata=_cli(
            "process-group timeout in seconds, bounds any hang (default: %(default)g)",
            type=_positive_seconds,
        ),
    )
    init_from: str | None = field(
        default=None,
        metadata=_cli(
            "warm start: a new run (its own --checkpoint-dir) begins from the model weights of "
            "this checkpoint file, or of the newest verified checkpoint in this run's root; a "
            "run that already has checkpoints of its own resumes them instead",
            type=_init_source,
            metavar="PATH",
        ),
    )
    init_optimizer: bool = field(
        default=False,
        metadata=_cli(
            "with --init-from: also load the optimizer state (its shapes must match)",
            action="store_true",
        ),
    )
    parallelism: str = field(
        default="ddp",
        metadata=_cli(
            "ddp: every rank holds the whole model, rank 0 writes each checkpoint as one file; "
            "fsdp: parameters, gradients and optimizer state sharded over the ranks (FSDP2), "
            "each rank writing its shard of a sharded checkpoint (default: %(default)s). "
            "Either resumes the other's checkpoints, on any world size",
            type=_parallelism,
            metavar="{ddp,fsdp}",
        ),
    )

    def semantic_config(self) -> dict[str, object]:
        """What a checkpoint must agree with to be resumed.

        TOTAL_EPOCHS, SAVE_EVERY, --save-every-steps, --keep and --pg-timeout are left out on
        purpose: they change how long or how often we train/save, not what one training step
        computes, so a finished run may be extended with more epochs or saved more often.
        --init-from is left out too: it only seeds a fresh run's weights, and the run's own
        checkpoints record it. So is --parallelism: DDP and FSDP compute the same steps, and
        each loads the other's checkpoints. --global-batch-size is checked against the
        checkpoint's recorded global batch instead (``trainer.resume``): a checkpoint of a run
        started without the flag has the same global batch as one started with the value it
        implied.
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


class _Parser(argparse.ArgumentParser):
    """Raises :class:`UsageError` instead of printing the usage and exiting, so the caller
    decides who says it (rank 0 only, or the local runner before anything starts), and
    knows which field an argument sets."""

    def __init__(self, **kwargs: Any) -> None:
        self.field_of: dict[str, str] = {}  # argparse's name of an argument -> field
        super().__init__(exit_on_error=False, **kwargs)

    def add_argument(self, *names: str, **spelling: Any) -> argparse.Action:
        action = super().add_argument(*names, **spelling)
        # The names argparse's errors use: "--a/--b" for a flag, the metavar of a positional.
        for name in (action.metavar, "/".join(action.option_strings)):
            if name:
                self.field_of[name] = action.dest
        return action

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def parse_config_args(self, argv: Sequence[str] | None) -> argparse.Namespace:
        try:
            return self.parse_args(argv)
        except argparse.ArgumentError as error:
            field = self.field_of.get(error.argument_name or "")
            raise UsageError(str(error), field) from None


def build_parser() -> _Parser:
    parser = _Parser(
        prog="python -m trainer",
        description="Fault-tolerant, resumable DDP or FSDP trainer (run it under torchrun).",
    )
    for spec in fields(TrainConfig):
        option: Option = spec.metadata["option"]
        if option.positional:
            parser.add_argument(
                spec.name, metavar=spec.name.upper(), type=option.type, help=option.help
            )
            continue
        spelling: dict[str, Any] = {"dest": spec.name, "default": spec.default, "help": option.help}
        if isinstance(spec.default, str):
            # argparse would run `type` on a string default, checking the trainer's own choice
            # (is /checkpoints writable here?) on every machine that merely parses a command
            # line; unset reads as None, and parse_config puts the default in.
            spelling.update(default=None, help=option.help.replace("%(default)s", spec.default))
        if option.action is not None:
            spelling["action"] = option.action
        else:
            spelling["type"] = option.type
        if option.metavar is not None:
            spelling["metavar"] = option.metavar
        parser.add_argument(*(option.flags or (f"--{spec.name.replace('_', '-')}",)), **spelling)
    return parser


def parse_config(argv: Sequence[str] | None = None) -> TrainConfig:
    """The validated config; raises :class:`UsageError` (``--help`` still prints and exits)."""
    args = build_parser().parse_config_args(argv)
    if args.checkpoint_dir is not None:  # named: the trainer's own default is not asked
        _refuse_unusable_root(args.checkpoint_dir, args.create_bucket)
    for spec in fields(TrainConfig):
        if getattr(args, spec.name) is None and isinstance(spec.default, str):
            setattr(args, spec.name, spec.default)
    if args.init_optimizer and args.init_from is None:
        raise UsageError(
            "--init-optimizer needs --init-from PATH (the run to take it from)", "init_optimizer"
        )
    own = open_storage(args.checkpoint_dir)
    if args.create_bucket and own.local_directory() is not None:
        raise UsageError(
            f"argument --create-bucket: --checkpoint-dir {args.checkpoint_dir!r} is a directory, "
            "not in a bucket; the flag is for object-storage roots (s3://BUCKET/PREFIX)",
            "create_bucket",
        )
    if args.init_from is not None and own.encloses(open_storage(args.init_from)):
        raise UsageError(
            f"argument --init-from: {args.init_from!r} is inside this run's "
            f"--checkpoint-dir {args.checkpoint_dir!r}; a warm start writes to a new "
            "directory, so pass another --checkpoint-dir",
            "init_from",
        )
    return TrainConfig(**{spec.name: getattr(args, spec.name) for spec in fields(TrainConfig)})
