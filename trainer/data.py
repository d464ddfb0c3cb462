"""Deterministic, sharded data order without a DataLoader.

The order is a pure function of (seed, epoch, rank, world size) and matches
``torch.utils.data.DistributedSampler(shuffle=True, seed=seed, drop_last=False)`` exactly, so a
run is comparable sample-for-sample with the tutorial's loop, and a resume needs only the epoch
and the step inside it. Batches are gathered by index from tensors that already live on the
device, which removes the per-sample ``__getitem__`` + collate cost of a DataLoader.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch


def epoch_indices(
    dataset_size: int, seed: int, epoch: int, rank: int, world_size: int
) -> list[int]:
    """This rank's sample indices for ``epoch`` (DistributedSampler's algorithm)."""
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    order = torch.randperm(dataset_size, generator=generator).tolist()
    per_rank = -(-dataset_size // world_size)
    total = per_rank * world_size
    padding = total - dataset_size
    # Pad by repeating the head so every rank runs the same number of steps (no DDP hang).
    while padding > 0:
        extra = order[:padding]
        order += extra
        padding -= len(extra)
    return order[rank:total:world_size]


@dataclass
class ShardedBatches:
    inputs: torch.Tensor
    targets: torch.Tensor
    batch_size: int
    seed: int
    rank: int
    world_size: int

    @property
    def dataset_size(self) -> int:
        return self.inputs.shape[0]

    def steps_per_epoch(self) -> int:
        per_rank = -(-self.dataset_size // self.world_size)
        return -(-per_rank // self.batch_size)

    def batches(
        self, epoch: int, start_step: int = 0
    ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """Yield ``(step, inputs, targets)`` from ``start_step`` on (a resume mid-epoch)."""
        indices = torch.tensor(
            epoch_indices(self.dataset_size, self.seed, epoch, self.rank, self.world_size),
            dtype=torch.long,
            device=self.inputs.device,
        )
        for step in range(start_step, self.steps_per_epoch()):
            batch = indices[step * self.batch_size : (step + 1) * self.batch_size]
            yield step, self.inputs.index_select(0, batch), self.targets.index_select(0, batch)
