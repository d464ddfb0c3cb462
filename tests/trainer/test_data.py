"""The trainer's data order is DistributedSampler's, without a DataLoader."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DistributedSampler

from trainer.data import ShardedBatches, epoch_indices


@pytest.mark.parametrize(("size", "world"), [(256, 2), (10, 3), (7, 4), (2, 3)])
def test_order_matches_distributed_sampler(size: int, world: int) -> None:
    for rank in range(world):
        sampler = DistributedSampler(range(size), num_replicas=world, rank=rank, seed=5)
        for epoch in (0, 3):
            sampler.set_epoch(epoch)
            assert epoch_indices(size, 5, epoch, rank, world) == list(sampler)


def test_ranks_cover_the_dataset_and_epochs_differ() -> None:
    shards = [set(epoch_indices(100, 0, 1, rank, 4)) for rank in range(4)]
    assert set().union(*shards) == set(range(100))
    assert epoch_indices(100, 0, 1, 0, 4) != epoch_indices(100, 0, 2, 0, 4)


def test_resuming_mid_epoch_yields_the_remaining_batches() -> None:
    inputs = torch.arange(50, dtype=torch.float32).unsqueeze(1)
    data = ShardedBatches(inputs, inputs * 2, batch_size=4, seed=0, rank=1, world_size=2)
    full = list(data.batches(epoch=3))
    assert len(full) == data.steps_per_epoch() == 7  # 25 samples per rank, last batch of 1
    resumed = list(data.batches(epoch=3, start_step=4))
    assert [step for step, _, _ in resumed] == [4, 5, 6]
    for (_, x_full, y_full), (_, x_res, y_res) in zip(full[4:], resumed, strict=True):
        assert torch.equal(x_full, x_res) and torch.equal(y_full, y_res)
    seen = torch.cat([x for _, x, _ in full]).squeeze(1).long().tolist()
    assert seen == epoch_indices(50, 0, 3, 1, 2)
