"""A run's TensorBoard curves as TensorBoard's own reader keeps them (its purges applied), for
the trainer's unit tests and the real node's."""

from __future__ import annotations

from pathlib import Path


def curves(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files in ``directory``: (step, value) in the reader's order,
    none sampled away."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }
