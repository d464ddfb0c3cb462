"""One report of a run in the middle of its second epoch, resumed once, for the tests of the
places reports go (trainer/report.py's sinks)."""

from __future__ import annotations

from trainer.report import CheckpointSaved, Snapshot

JOB = "mnist-ddp"
SAVE = CheckpointSaved(
    epoch=1, step=0, global_step=100, seconds=0.3, bytes=1_000_000, time=1_699_999_990.0
)
SNAPSHOT = Snapshot(
    time=1_700_000_000.5,
    job=JOB,
    epoch=2,
    epochs=5,
    step=30,
    steps=100,
    global_step=130,
    samples=8320,
    samples_per_s=1234.5,
    loss=0.42,
    loss_is_global=False,
    learning_rate=0.001,
    eta_s=61.0,
    world_size=4,
    resumed=True,
    restarts=1,
    last_checkpoint=None,
    done=False,
)
