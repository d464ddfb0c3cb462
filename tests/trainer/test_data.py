"""The trainer's data order: one sample order per epoch and one global batch on any world size,
equal to DistributedSampler's where the world size divides the dataset, without a DataLoader."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils.data import DistributedSampler

from trainer.data import GlobalBatches, micro_batch_sizes


def batches(
    size: int, global_batch: int, micro: int, rank: int, world: int, seed: int = 5
) -> GlobalBatches:
    inputs = torch.arange(size, dtype=torch.float32).unsqueeze(1)
    return GlobalBatches(inputs, inputs * 2, global_batch, micro, seed, rank, world)


def samples_of(data: GlobalBatches, epoch: int, start_step: int = 0) -> list[list[int]]:
    """Per step, the sample indices this rank trains on (stand-ins left out)."""
    return [
        [index for piece in pieces if piece.size for index in piece.indices.tolist()]
        for _, pieces in data.batches(epoch, start_step)
    ]


@pytest.mark.parametrize(("size", "world", "batch"), [(256, 2, 32), (12, 3, 2), (100, 4, 8)])
def test_where_the_world_size_divides_the_dataset_the_order_is_distributed_samplers(
    size: int, world: int, batch: int
) -> None:
    for rank in range(world):
        sampler = DistributedSampler(range(size), num_replicas=world, rank=rank, seed=5)
        data = batches(size, batch * world, batch, rank, world)
        for epoch in (0, 3):
            sampler.set_epoch(epoch)
            expected = list(sampler)
            steps = samples_of(data, epoch)
            assert steps == [expected[i : i + batch] for i in range(0, len(expected), batch)]
            # One micro-batch of weight exactly 1: the loop's plain step, as the tutorial's.
            assert all(
                len(pieces) == 1 and pieces[0].scale == 1.0 for _, pieces in data.batches(epoch)
            )


@pytest.mark.parametrize("world", [1, 2, 3, 5, 7])
def test_every_world_size_trains_the_same_windows_each_sample_once(world: int) -> None:
    size, global_batch = 50, 12  # 5 steps, the last one of 2 samples
    reference = batches(size, global_batch, global_batch, 0, 1)
    windows = [set(step) for step in samples_of(reference, epoch=2)]
    per_rank = [samples_of(batches(size, global_batch, 4, rank, world), 2) for rank in range(world)]
    assert all(len(steps) == len(windows) == 5 for steps in per_rank)
    for step, window in enumerate(windows):
        shares = [steps[step] for steps in per_rank]
        assert set().union(*shares) == window
        assert sum(len(share) for share in shares) == len(window)  # no sample twice
    everything = Counter(i for steps in per_rank for step in steps for i in step)
    assert everything == Counter(range(size))


def test_a_shares_weights_make_the_ranks_mean_the_mean_over_the_window() -> None:
    """DDP averages the ranks' gradients; each micro-batch's mean loss times its scale, summed
    on its rank and averaged over ranks, is the mean over the window's samples."""
    size, global_batch, world = 30, 10, 3  # shares of 4, 3, 3; the micro-batch cap splits 4
    values = torch.rand(size, generator=torch.Generator().manual_seed(1))
    for step in range(3):
        averaged = 0.0
        window: list[int] = []
        for rank in range(world):
            data = batches(size, global_batch, 3, rank, world)
            order = torch.randperm(size, generator=torch.Generator().manual_seed(5 + 1))
            pieces = data.step_batches(order, step)
            averaged += sum(float(values[p.indices].mean()) * p.scale for p in pieces) / world
            window += [i for p in pieces for i in p.indices.tolist()]
        assert averaged == pytest.approx(float(values[window].mean()), rel=1e-6)


def test_a_rank_with_no_share_in_the_last_window_gets_a_weightless_stand_in() -> None:
    data = batches(9, 4, 4, rank=2, world=3)  # last window: 1 sample, ranks 1 and 2 get none
    *_, (step, pieces) = data.batches(epoch=0)
    assert step == 2 and len(pieces) == 1
    assert (pieces[0].size, pieces[0].scale, pieces[0].inputs.shape[0]) == (0, 0.0, 1)


def test_resuming_mid_epoch_yields_the_remaining_batches() -> None:
    data = batches(50, 8, 4, rank=1, world=2, seed=0)
    full = list(data.batches(epoch=3))
    assert len(full) == data.steps_per_epoch() == 7  # 50 samples in windows of 8, last of 2
    resumed = list(data.batches(epoch=3, start_step=4))
    assert [step for step, _ in resumed] == [4, 5, 6]
    for (_, whole), (_, again) in zip(full[4:], resumed, strict=True):
        for piece, same in zip(whole, again, strict=True):
            assert torch.equal(piece.inputs, same.inputs)
            assert torch.equal(piece.targets, same.targets)
    assert data.position(4) == 32 and data.position(7) == 50


def test_micro_batches_split_a_share_at_the_cap() -> None:
    assert micro_batch_sizes(64, 32) == [32, 32]
    assert micro_batch_sizes(22, 32) == [22]
    assert micro_batch_sizes(70, 32) == [32, 32, 6]
    assert batches(64, 64, 32, 0, 1).micro_batches_per_step() == 2
    assert batches(64, 64, 32, 0, 3).micro_batches_per_step() == 1
