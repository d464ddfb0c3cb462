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
    SHARDED_FORMAT_VERSION,
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
        "GLOBAL_BATCH",
        "EPOCH_POSITION",
    }
    assert (FORMAT_VERSION, SHARDED_FORMAT_VERSION) == (2, 3)


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


def test_a_version_1_file_knows_its_global_batch_from_its_config() -> None:
    # Version 1 files hold neither GLOBAL_BATCH nor EPOCH_POSITION: their global batch was the
    # per-rank batch times the world size.
    state = full_checkpoint().to_state()
    state.update({FORMAT_VERSION_KEY: 1, "CONFIG": {"batch_size": 16}})
    del state["GLOBAL_BATCH"], state["EPOCH_POSITION"]
    read = TrainingCheckpoint.from_state(state)
    assert (read.run_global_batch(), read.epoch_position) == (32, None)
    written = TrainingCheckpoint.from_state({**state, "GLOBAL_BATCH": 48, "EPOCH_POSITION": 96})
    assert (written.run_global_batch(), written.epoch_position) == (48, 96)


def test_another_world_size_gets_the_rng_streams_round_robin_and_the_loss_once() -> None:
    states = [
        RankState({"torch": torch.tensor([rank])}, 1.5 * rank, 10 + rank) for rank in range(2)
    ]
    checkpoint = TrainingCheckpoint(
        model_state={},
        epochs_run=1,
        world_size=2,
        config_fingerprint="f",
        per_rank=[item.to_state() for item in states],
    )
    assert checkpoint.rank_state(1, 2) == states[1]  # the same world size: its own
    on_three = [checkpoint.rank_state(rank, 3) for rank in range(3)]
    assert [int(item.rng["torch"]) for item in on_three] == [0, 1, 0]
    assert [(item.loss_sum, item.samples) for item in on_three] == [(1.5, 21), (0.0, 0), (0.0, 0)]
    alone = checkpoint.rank_state(0, 1)
    assert (int(alone.rng["torch"]), alone.loss_sum, alone.samples) == (0, 1.5, 21)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda state: state.pop(EPOCHS_RUN), "ckpt.pt lacks EPOCHS_RUN"),
        (lambda state: [state.pop(WORLD_SIZE), state.pop(MODEL_STATE)], "lacks MODEL_STATE, WORLD"),
        (
            lambda state: state.update({FORMAT_VERSION_KEY: SHARDED_FORMAT_VERSION + 1}),
            f"ckpt.pt has format version {SHARDED_FORMAT_VERSION + 1}, this trainer reads up to 3",
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
