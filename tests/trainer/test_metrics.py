"""trainer/metrics.py: the per-epoch loss, folded step by step exactly as a float64 sum would be;
the rows' saves and restarts, and the resume's rewind keeping them."""

from __future__ import annotations

from pathlib import Path

import torch

from trainer.metrics import EpochLoss, EpochMetrics, MetricsLog, read_metrics, rewind


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


def test_saves_and_resumed_round_trip_and_default_to_none(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path, 4, 0)
    plain = log.record(1, 0.5, 256, 0.5, 0.1)
    saved = log.record(2, 0.25, 256, 0.5, 0.1, saves=[8, 16], resumed=True)
    assert (plain.saves, plain.resumed) == ((), False)
    assert (saved.saves, saved.resumed) == ((8, 16), True)
    rows = read_metrics(tmp_path)
    assert [(row["saves"], row["resumed"]) for row in rows] == [([], False), ([8, 16], True)]
    assert EpochMetrics(**{**rows[1], "saves": tuple(rows[1]["saves"])}) == saved


def test_a_row_from_before_saves_and_resumed_reads_with_their_defaults() -> None:
    old = {
        "epoch": 3,
        "total_epochs": 4,
        "loss": 0.5,
        "samples": 256,
        "seconds": 0.5,
        "samples_per_s": 512.0,
        "eta_s": 1.0,
        "lr": None,
    }
    row = EpochMetrics(**old)
    assert (row.saves, row.resumed) == ((), False)


def test_rewind_keeps_the_rows_up_to_the_checkpoint_whole(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path, 6, 0)
    for epoch in range(1, 6):
        log.record(epoch, 1.0 / epoch, 256, 0.5, 0.1, saves=[16] if epoch % 2 == 0 else [])
    before = read_metrics(tmp_path)
    assert rewind(tmp_path, 4) == 1
    assert read_metrics(tmp_path) == before[:4]  # epoch 2's and 4's saves kept
    resumed = MetricsLog(tmp_path, 6, 4)
    resumed.record(5, 0.2, 256, 0.5, 0.1, resumed=True)
    assert [row["resumed"] for row in read_metrics(tmp_path)] == [False] * 4 + [True]
    assert rewind(tmp_path, 5) == 0  # nothing after the checkpoint: the file is left as it is
    # A second failure before a checkpoint after epoch 5: its restart row goes too (the next
    # process writes its own).
    assert rewind(tmp_path, 4) == 1
    assert [row["epoch"] for row in read_metrics(tmp_path)] == [1, 2, 3, 4]
