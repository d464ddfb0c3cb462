"""The checkpoint schema: the dictionary on disk round-trips through TrainingCheckpoint, files of
earlier trainers still read, and what this trainer cannot use is refused naming the file."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from trainer.checkpoint_schema import (
    EPOCHS_RUN,
    FORMAT_VERSION,
    FORMAT_VERSION_KEY,
    LEGACY_DATA_STATE,
    MODEL_STATE,
    REQUIRED_KEYS,
    WORLD_SIZE,
    CheckpointError,
    RankState,
    TrainingCheckpoint,
)


def full_checkpoint() -> TrainingCheckpoint:
    rank = RankState({"torch": torch.get_rng_state()}, 1.5, 64)
    return TrainingCheckpoint(
        model_state={"weight": torch.ones(2, 2)},
        epochs_run=7,
        world_size=2,
        config_fingerprint="f00d",
        optimizer_state={"state": {}, "param_groups": []},
        scheduler_state={"last_epoch": 7},
        per_rank=[rank.to_state(), rank.to_state()],
        config={"seed": 0},
        origin={"path": "/elsewhere/checkpoint-e000003-s000000.pt"},
    )


def test_the_on_disk_keys_do_not_change() -> None:
    # The one place outside the schema that spells the keys, on purpose: a pin, so renaming a
    # constant cannot orphan every existing checkpoint, nor the tutorial's
    # torch.load(path)["MODEL_STATE"] / ["EPOCHS_RUN"].
    assert set(full_checkpoint().to_state()) == {
        "FORMAT_VERSION",
        "MODEL_STATE",
        "EPOCHS_RUN",
        "OPTIMIZER_STATE",
        "SCHEDULER_STATE",
        "PER_RANK",
        "WORLD_SIZE",
        "CONFIG",
        "CONFIG_FINGERPRINT",
        "ORIGIN",
    }
    assert FORMAT_VERSION == 1


def test_to_state_and_from_state_round_trip_without_copying_tensors() -> None:
    checkpoint = full_checkpoint()
    state = checkpoint.to_state()
    assert state[MODEL_STATE] is checkpoint.model_state  # a save copies once, in the writer
    again = TrainingCheckpoint.from_state(state)
    assert again == checkpoint
    assert again.rank_state(1) == RankState.from_state(checkpoint.per_rank[1])
    assert again.rank_state(1).samples == 64


def test_files_of_earlier_trainers_and_other_tools_read() -> None:
    # Earlier trainers wrote DATA_STATE (ignored now); the bench and the tutorial-shaped tests
    # write only the required keys: the rest reads as empty.
    minimal = {key: full_checkpoint().to_state()[key] for key in REQUIRED_KEYS}
    read = TrainingCheckpoint.from_state({**minimal, LEGACY_DATA_STATE: {"epoch": 7}})
    assert (read.epochs_run, read.world_size, read.optimizer_state, read.per_rank) == (
        7,
        2,
        None,
        [],
    )
    assert LEGACY_DATA_STATE not in read.to_state()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda state: state.pop(EPOCHS_RUN), "ckpt.pt lacks EPOCHS_RUN"),
        (lambda state: [state.pop(WORLD_SIZE), state.pop(MODEL_STATE)], "lacks MODEL_STATE, WORLD"),
        (
            lambda state: state.update({FORMAT_VERSION_KEY: FORMAT_VERSION + 1}),
            f"ckpt.pt has format version {FORMAT_VERSION + 1}, this trainer reads up to 1",
        ),
    ],
)
def test_what_cannot_be_used_is_refused_naming_the_file(
    change: Callable[[dict[str, Any]], object], expected: str
) -> None:
    state = full_checkpoint().to_state()
    change(state)
    with pytest.raises(CheckpointError, match=re.escape(expected)):
        TrainingCheckpoint.from_state(state, "ckpt.pt")
    with pytest.raises(
        CheckpointError, match=re.escape("ckpt.pt does not hold a checkpoint dictionary")
    ):
        TrainingCheckpoint.from_state([1, 2], "ckpt.pt")
