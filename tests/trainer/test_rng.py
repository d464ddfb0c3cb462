"""trainer/rng.py: every generator a task may draw from, captured as plain values (what
``torch.load(weights_only=True)`` accepts) and restored, so the draws after a restore repeat
the draws after the capture."""

from __future__ import annotations

import io
import random

import numpy as np
import torch

from trainer.rng import capture_rng, restore_rng


def draws() -> tuple[list[float], list[float], list[float]]:
    return (
        torch.rand(4).tolist(),
        np.random.rand(4).tolist(),
        [random.random() for _ in range(4)],
    )


def test_restoring_a_capture_repeats_every_generators_draws() -> None:
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    state = capture_rng()
    first = draws()
    assert draws() != first  # the generators moved on
    restore_rng(state)
    assert draws() == first


def test_a_capture_survives_a_weights_only_checkpoint() -> None:
    random.gauss(0, 1)  # python's cached gauss is part of the state too
    np.random.standard_normal()
    state = capture_rng()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    expected = draws()
    restore_rng(loaded)
    assert draws() == expected
