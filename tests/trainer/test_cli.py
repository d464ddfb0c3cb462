"""CLI validation: defaults match the tutorial, bad values name the flag and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.conftest import run_trainer
from trainer.cli import DEFAULT_TASK, parse_config


def test_defaults_keep_the_tutorial_shape() -> None:
    config = parse_config(["100", "25"])
    assert (config.total_epochs, config.save_every, config.batch_size) == (100, 25, 32)
    assert config.checkpoint_dir == Path("/checkpoints")
    assert (config.seed, config.dataset_size, config.keep) == (0, 2048, 2)
    assert config.task == DEFAULT_TASK and config.pg_timeout == 300.0
    assert parse_config(["--batch_size", "8", "100", "25"]).batch_size == 8


def test_fingerprint_ignores_how_long_and_how_often_but_not_what() -> None:
    base = parse_config(["100", "25"]).fingerprint()
    assert parse_config(["300", "7", "--keep", "4"]).fingerprint() == base
    assert parse_config(["100", "25", "--seed", "1"]).fingerprint() != base
    assert parse_config(["100", "25", "--batch_size", "16"]).fingerprint() != base


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["100", "0"], "argument SAVE_EVERY: must be an integer >= 1"),
        (["-5", "25"], "argument TOTAL_EPOCHS: must be an integer >= 1"),
        (["ten", "25"], "argument TOTAL_EPOCHS: must be an integer >= 1 (epochs to train in"),
        (["100", "25", "--batch_size", "0"], "argument --batch_size/--batch-size: must be"),
        (["100", "25", "--keep", "1"], "argument --keep: must be an integer >= 2"),
        (["100", "25", "--dataset-size", "0"], "argument --dataset-size: must be an integer >= 1"),
        (["100", "25", "--seed", "-1"], "argument --seed: must be an integer in [0, 2**63)"),
        (["100", "25", "--pg-timeout", "0"], "argument --pg-timeout: must be a number of seconds"),
        (["100", "25", "--task", "nocolon"], "argument --task: must be MODULE:FUNCTION"),
        (["100", "25", "--task", "no_such_mod:f"], "argument --task: cannot import module"),
        (["100", "25", "--task", "trainer.task:nope"], "has no callable 'nope'"),
    ],
)
def test_bad_values_name_the_flag_and_what_is_allowed(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_config(argv)
    assert exited.value.code == 2
    assert expected in capsys.readouterr().err


def test_a_checkpoint_dir_that_is_a_file_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(SystemExit):
        parse_config(["10", "5", "--checkpoint-dir", str(afile)])
    assert "argument --checkpoint-dir" in capsys.readouterr().err


@pytest.mark.slow
def test_torchrun_with_a_bad_value_fails_before_creating_anything(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    finished = run_trainer(["100", "0", "--checkpoint-dir", str(directory)])
    assert finished.returncode != 0
    assert "argument SAVE_EVERY: must be an integer >= 1" in finished.output
    assert not directory.exists()
