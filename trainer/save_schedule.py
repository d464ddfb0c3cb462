"""When the training loop saves on schedule: after every ``SAVE_EVERY`` completed epochs, after
every ``--save-every-steps`` optimizer steps (counted from the start of training, so mid-epoch
too), and after the last epoch. The saves a stop adds (SIGTERM, a peer's stop) are the loop's:
they happen wherever training stops, on schedule or not.

A step count that falls on an epoch's end is that epoch's save, never a second one of the same
weights under a mid-epoch name: a checkpoint's position is (epochs completed, steps into the
next epoch), and the end of epoch E is (E + 1, 0).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SaveSchedule:
    every_epochs: int
    every_steps: int | None
    steps_per_epoch: int
    total_epochs: int

    def after_step(self, epoch: int, done_steps: int) -> bool:
        """Save once ``done_steps`` steps of epoch ``epoch`` (0-based) are done?"""
        if self.every_steps is None or done_steps >= self.steps_per_epoch:
            return False
        return (epoch * self.steps_per_epoch + done_steps) % self.every_steps == 0

    def after_epoch(self, done_epochs: int) -> bool:
        """Save once ``done_epochs`` epochs are complete?"""
        on_steps = (
            self.every_steps is not None
            and (done_epochs * self.steps_per_epoch) % self.every_steps == 0
        )
        return done_epochs % self.every_epochs == 0 or done_epochs == self.total_epochs or on_steps
