"""CLI validation: defaults match the tutorial, bad values name the flag and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.conftest import LAUNCH, run_trainer
from trainer.cli import DEFAULT_TASK, UsageError, parse_config


def test_defaults_keep_the_tutorial_shape() -> None:
    config = parse_config(["100", "25"])
    assert (config.total_epochs, config.save_every, config.batch_size) == (100, 25, 32)
    assert config.checkpoint_dir == "/checkpoints"
    assert (config.seed, config.dataset_size, config.keep) == (0, 2048, 2)
    assert config.task == DEFAULT_TASK and config.pg_timeout == 300.0
    assert parse_config(["--batch_size", "8", "100", "25"]).batch_size == 8


def test_fingerprint_ignores_how_long_and_how_often_but_not_what() -> None:
    base = parse_config(["100", "25"]).fingerprint()
    assert parse_config(["300", "7", "--keep", "4"]).fingerprint() == base
    assert parse_config(["100", "25", "--seed", "1"]).fingerprint() != base
    assert parse_config(["100", "25", "--batch_size", "16"]).fingerprint() != base


@pytest.mark.parametrize(
    ("argv", "field", "expected"),
    [
        (["100", "0"], "save_every", "argument SAVE_EVERY: must be an integer >= 1"),
        (["-5", "25"], "total_epochs", "argument TOTAL_EPOCHS: must be an integer >= 1"),
        (["ten", "25"], "total_epochs", "argument TOTAL_EPOCHS: must be an integer >= 1 (epochs"),
        (["100", "25", "--batch_size", "0"], "batch_size", "argument --batch_size/--batch-size:"),
        (["100", "25", "--keep", "1"], "keep", "argument --keep: must be an integer >= 2"),
        (["100", "25", "--dataset-size", "0"], "dataset_size", "argument --dataset-size: must be"),
        (["100", "25", "--seed", "-1"], "seed", "argument --seed: must be an integer in [0, 2**"),
        (["100", "25", "--pg-timeout", "0"], "pg_timeout", "argument --pg-timeout: must be a"),
        (["100", "25", "--task", "nocolon"], "task", "argument --task: must be MODULE:FUNCTION"),
        (["100", "25", "--task", "no_such_mod:f"], "task", "argument --task: cannot import module"),
        (["100", "25", "--task", "trainer.task:nope"], "task", "has no callable 'nope'"),
        (["100"], None, "the following arguments are required: SAVE_EVERY"),
        (["100", "25", "--epochs", "3"], None, "unrecognized arguments: --epochs 3"),
        (["100", "25", "--init-optimizer"], "init_optimizer", "--init-optimizer needs --init-from"),
        (
            ["100", "25", "--parallelism", "zero3"],
            "parallelism",
            "argument --parallelism: must be one of ddp, fsdp, got 'zero3'",
        ),
    ],
)
def test_bad_values_name_the_flag_and_what_is_allowed(
    argv: list[str], field: str | None, expected: str
) -> None:
    with pytest.raises(UsageError) as refused:
        parse_config(argv)
    assert expected in str(refused.value)
    assert "\n" not in str(refused.value)  # one line
    assert refused.value.field == field  # the local runner names the stack key from it


def test_a_checkpoint_dir_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(UsageError, match=r"argument --checkpoint-dir: .* exists and is not a dir"):
        parse_config(["10", "5", "--checkpoint-dir", str(afile)])


def test_a_checkpoint_dir_that_cannot_be_created_is_rejected_creating_nothing(
    tmp_path: Path,
) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    wanted = afile / "runs" / "ckpt"
    with pytest.raises(UsageError, match=f"cannot be created: {afile} is not a directory"):
        parse_config(["10", "5", "--checkpoint-dir", str(wanted)])
    # A directory that does not exist yet is fine: the trainer creates it (parsing does not).
    missing = str(tmp_path / "new" / "ckpt")
    assert parse_config(["10", "5", "--checkpoint-dir", missing]).checkpoint_dir == missing
    assert sorted(tmp_path.iterdir()) == [afile]


@pytest.mark.slow
def test_a_bad_value_under_torchrun_is_one_line_from_rank_0_and_exit_code_2(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "ckpt"
    finished = run_trainer(["100", "0", "--checkpoint-dir", str(directory)], launcher=LAUNCH)
    assert finished.returncode == 2, finished.output  # permanent: a retry fails the same way
    errors = [line for line in finished.output.splitlines() if "error:" in line]
    assert errors == [
        "error: argument SAVE_EVERY: must be an integer >= 1 (save every N completed epochs), got 0"
    ], finished.output
    assert "Traceback" not in finished.output
    assert "usage:" not in finished.output
    assert not directory.exists()
