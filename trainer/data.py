"""The data order: one sample order per epoch and one global batch, whatever the world size.

Epoch ``e`` visits the dataset in the order ``randperm(N)`` seeded with ``seed + e``, which no
rank count enters. Step ``s`` trains on the window ``order[s*G : (s+1)*G]`` (the last window may
be shorter), where ``G`` is the run's global batch, fixed when the run starts. The window is
split over the ``W`` ranks by striding (rank ``r`` takes ``window[r::W]``), and a rank whose
share is larger than its micro-batch (``--batch_size``) runs it in several micro-batches and
accumulates their gradients. Each micro-batch's mean loss is weighted by its share of the
window (``size * W / len(window)``), so that DDP's average over ranks is exactly the mean over
the window's samples: the same gradient on any number of ranks, up to float rounding.

Hence a checkpoint needs only the epoch and the position in it (``step * G``) to resume on any
world size: the remaining windows are the same, and each remaining sample is trained once.

When ``W`` divides both ``G`` and the dataset, every share is ``G / W`` samples with weight
exactly 1: the order is ``torch.utils.data.DistributedSampler(shuffle=True, seed=seed,
drop_last=False)``'s, batch for batch, so a run is comparable sample-for-sample with the
tutorial's loop. Where ``W`` does not divide the dataset, the sampler would repeat samples to
even the ranks out; here no sample is repeated and the uneven last window is weighted instead.
Batches are gathered by index from tensors that already live on the device, which removes the
per-sample ``__getitem__`` + collate cost of a DataLoader.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch


class MicroBatch(NamedTuple):
    """What one forward pass of one rank takes: ``size`` samples (0 for the stand-in of a rank
    with no share in a short last window), whose mean loss is weighted by ``scale``."""

    indices: torch.Tensor
    inputs: torch.Tensor
    targets: torch.Tensor
    size: int
    scale: float


def epoch_order(dataset_size: int, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's sample order, the same on every rank and for every world size."""
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(dataset_size, generator=generator)


def steps_per_epoch(dataset_size: int, global_batch: int) -> int:
    return -(-dataset_size // global_batch)


def window(order: torch.Tensor, step: int, global_batch: int) -> torch.Tensor:
    """The samples step ``step`` trains on, over all ranks together."""
    return order[step * global_batch : (step + 1) * global_batch]


def rank_share(samples: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's part of a window: every ``world_size``-th sample from position ``rank``."""
    return samples[rank::world_size]


def micro_batch_sizes(share: int, micro_batch: int) -> list[int]:
    """How a share of ``share`` samples is run with at most ``micro_batch`` at a time."""
    full, rest = divmod(share, micro_batch)
    return [micro_batch] * full + ([rest] if rest else [])


@dataclass
class GlobalBatches:
    """One rank's view of the run's batches (see the module docstring).

    ``micro_batch`` bounds the samples one forward pass takes on this rank (what fits in its
    memory); ``global_batch`` is the samples one optimizer step takes over all ranks."""

    inputs: torch.Tensor
    targets: torch.Tensor
    global_batch: int
    micro_batch: int
    seed: int
    rank: int
    world_size: int

    @property
    def dataset_size(self) -> int:
        return self.inputs.shape[0]

    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.dataset_size, self.global_batch)

    def position(self, step: int) -> int:
        """Samples of the epoch trained once ``step`` steps are done (the same on every rank)."""
        return min(step * self.global_batch, self.dataset_size)

    def micro_batches_per_step(self) -> int:
        """The most micro-batches a rank runs in a full step (1: no gradient accumulation)."""
        share = -(-self.global_batch // self.world_size)
        return len(micro_batch_sizes(share, self.micro_batch))

    def batches(self, epoch: int, start_step: int = 0) -> Iterator[tuple[int, list[MicroBatch]]]:
        """Yield ``(step, micro-batches)`` from ``start_step`` on (a resume mid-epoch)."""
        order = epoch_order(self.dataset_size, self.seed, epoch).to(self.inputs.device)
        for step in range(start_step, self.steps_per_epoch()):
            yield step, self.step_batches(order, step)

    def step_batches(self, order: torch.Tensor, step: int) -> list[MicroBatch]:
        samples = window(order, step, self.global_batch)
        length, world = samples.shape[0], self.world_size
        share = rank_share(samples, self.rank, world)
        if share.shape[0] == 0:
            # Fewer samples than ranks in the last window: this rank still takes part in the
            # gradient all-reduce, with a stand-in sample whose loss weighs nothing.
            return [self._micro_batch(samples[:1], 0, 0.0)]
        pieces: list[MicroBatch] = []
        start = 0
        for size in micro_batch_sizes(share.shape[0], self.micro_batch):
            scale = 1.0 if size * world == length else size * world / length
            pieces.append(self._micro_batch(share[start : start + size], size, scale))
            start += size
        return pieces

    def _micro_batch(self, indices: torch.Tensor, size: int, scale: float) -> MicroBatch:
        inputs = self.inputs.index_select(0, indices)
        return MicroBatch(indices, inputs, self.targets.index_select(0, indices), size, scale)
