"""A test and debugging hook: what every rank trained on, step by step.

With ``TRAINER_STEP_LOG=DIR`` each rank appends one JSON line per optimizer step to
``DIR/steps-<pid>.jsonl``: the epoch, the step, the world size, the rank, the indices of the
samples it put through the model, and the sum of its micro-batches' mean losses times their
sizes (``loss_sum``; a step's loss over all ranks is the sum of their ``loss_sum`` over the sum
of their sample counts). It reads each loss back from the device every step, so it is for
checks (counting samples across a resume, comparing losses), not for production runs; unset,
the loop never looks at it again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import torch

from trainer.data import MicroBatch

STEP_LOG_ENV = "TRAINER_STEP_LOG"


class StepLog:
    def __init__(self, directory: Path, rank: int, world_size: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._rank, self._world_size = rank, world_size
        # One file per process: ranks and restarted runs never interleave their lines.
        self._file: IO[str] = (directory / f"steps-{os.getpid()}.jsonl").open("a", buffering=1)

    @classmethod
    def from_environment(cls, rank: int, world_size: int) -> StepLog | None:
        directory = os.environ.get(STEP_LOG_ENV)
        return cls(Path(directory), rank, world_size) if directory else None

    def record(
        self, epoch: int, step: int, pieces: Sequence[MicroBatch], losses: Sequence[torch.Tensor]
    ) -> None:
        samples = [index for piece in pieces if piece.size for index in piece.indices.tolist()]
        loss_sum = sum(float(loss) * piece.size for piece, loss in zip(pieces, losses, strict=True))
        line = {
            "epoch": epoch,
            "step": step,
            "world_size": self._world_size,
            "rank": self._rank,
            "samples": samples,
            "loss_sum": loss_sum,
        }
        self._file.write(json.dumps(line) + "\n")

    def close(self) -> None:
        self._file.close()
