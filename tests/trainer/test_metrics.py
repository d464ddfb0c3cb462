"""trainer/metrics.py's per-epoch loss: folded step by step exactly as a float64 sum would be."""

from __future__ import annotations

import torch

from trainer.metrics import EpochLoss


def test_epoch_loss_folds_exactly_like_a_float64_add_per_step() -> None:
    generator = torch.Generator().manual_seed(3)
    losses = torch.rand(50, generator=generator) * 7
    sizes = [32] * 49 + [31]
    reference = torch.tensor(0.25, dtype=torch.float64)
    folded = EpochLoss(0.25)
    for index, (loss, size) in enumerate(zip(losses, sizes, strict=True)):
        reference.add_(loss, alpha=size)
        folded.add(loss, size)
        if index == 20:
            assert folded.total() == reference.item()  # a checkpoint mid-epoch reads it
    assert folded.total() == reference.item()
