"""How a checkpoint write that failed in the background reaches the training loop: the failure
is kept where it happened (a writer thread, or the writer process's reply) and raised, once, by
the caller's next ``wait``. Both writers (``trainer.async_writer`` for whole files,
``trainer.sharded_writer`` for shards) hand failures back this way, so a failed save surfaces
the same way, as one :class:`CheckpointError`, whichever wrote it."""

from __future__ import annotations

from collections.abc import Callable

from trainer.checkpoint_schema import CheckpointError


class WriteFailure:
    """At most one failure of background work, kept until :meth:`raise_if_any`. A thread sets
    it and the caller reads it only after joining that thread, so no lock is needed."""

    def __init__(self) -> None:
        self._error: BaseException | None = None

    def record(self, error: BaseException) -> None:
        """Keep ``error`` for the caller (a writer process's reply, already an exception)."""
        self._error = error

    def run(self, work: Callable[[], object]) -> None:
        """Run ``work`` (a writer thread's target) and keep whatever it raises: an exception
        escaping a thread would only be printed, and the save would look committed."""
        try:
            work()
        except BaseException as error:
            self._error = error

    def raise_if_any(self) -> None:
        """Raise the kept failure, once, as the writers' one error type (its cause chained)."""
        if self._error is None:
            return
        error, self._error = self._error, None
        raise CheckpointError(f"checkpoint write failed: {error}") from error
