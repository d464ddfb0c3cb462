"""The save schedule on its own: every SAVE_EVERY epochs, every --save-every-steps steps counted
from the start of training, the last epoch always, and one save per position. Real runs keep
to it in test_loop (the reference run's manifest) and test_resume_world_size."""

from __future__ import annotations

from trainer.save_schedule import SaveSchedule


def saved_positions(schedule: SaveSchedule) -> list[tuple[int, int]]:
    """Where an uninterrupted run saves: (epochs completed, steps into the next epoch)."""
    positions = []
    for epoch in range(schedule.total_epochs):
        for done_steps in range(1, schedule.steps_per_epoch + 1):
            if schedule.after_step(epoch, done_steps):
                positions.append((epoch, done_steps))
        if schedule.after_epoch(epoch + 1):
            positions.append((epoch + 1, 0))
    return positions


def test_every_n_epochs_and_always_the_last() -> None:
    schedule = SaveSchedule(every_epochs=100, every_steps=None, steps_per_epoch=4, total_epochs=250)
    assert saved_positions(schedule) == [(100, 0), (200, 0), (250, 0)]


def test_every_n_steps_counts_across_epochs_and_an_epochs_end_is_that_epochs_save() -> None:
    # 4 steps per epoch, a save every 3 steps: global steps 3, 6, 9, 12 (the end of epoch 3,
    # saved once, as epoch 3's), 15, 18, and the last epoch's end.
    schedule = SaveSchedule(every_epochs=1000, every_steps=3, steps_per_epoch=4, total_epochs=5)
    assert saved_positions(schedule) == [(0, 3), (1, 2), (2, 1), (3, 0), (3, 3), (4, 2), (5, 0)]
    assert not schedule.after_step(2, 4)  # a whole epoch is never a mid-epoch position


def test_both_schedules_together_save_each_position_once() -> None:
    schedule = SaveSchedule(every_epochs=2, every_steps=2, steps_per_epoch=3, total_epochs=3)
    positions = saved_positions(schedule)
    assert positions == [(0, 2), (1, 1), (2, 0), (2, 2), (3, 0)]
    assert len(set(positions)) == len(positions)
