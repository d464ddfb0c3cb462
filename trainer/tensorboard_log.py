"""The run's TensorBoard event files: a ``ReportSink`` (``trainer.report``) that writes what rank
0 reports as TensorBoard scalars.

Why: TensorBoard draws the run as it trains and compares runs, from files it reads itself. The x
axis is the global step (``StepLoss.global_step``, ``Snapshot.global_step``), the same number on
any resume of the run, so an interrupted and resumed run is one curve. Each process writes a new
event file that begins with TensorBoard's purge marker (a ``SessionLog.START`` at the step after
its checkpoint's, 1 for a run that starts afresh): TensorBoard's reader then drops every event
of a step from there on that an earlier process wrote (it read past the checkpoint, then died),
and the steps trained again are drawn once, with their new values. The files are read in name
order, which is the order they were created in (``events.out.tfevents.SECONDS.HOST.NANOSECONDS``):
the clocks of two machines a process moves between must agree to within the restart's time.

Where: ``tensorboard/`` in the run's root, beside ``metrics.jsonl`` and the checkpoints. A root
that is a directory (``--checkpoint-dir PATH``, the claim) is written in place. A root in object
storage (``s3://``) has no file to append to: the files are written to a temporary directory of
this machine (under ``TRAINER_SPOOL_DIR`` when set) and each is uploaded whole, replacing its
object, through the run's storage after every report and at the end; a file that reaches
``ROTATE_BYTES`` is finished and the next begins, so an upload stays small however long the
run. No file is ever deleted from the root: a resumed process adds its own. ``make checkpoint``
copies ``tensorboard/`` with the run, and ``make tensorboard`` opens what it copied
(``LOGDIR=DIR`` for another directory: ``make local``'s runs under ``.checkpoints/STACK``).

How often each figure is written (all at the next report, which also flushes the file: every
``TRAINER_REPORT_EVERY_S`` seconds, at each epoch's end and at the end of the run):

* ``loss/step``: every optimizer step's loss on rank 0 (``StepLoss``), at its step, with a wall
  time spread evenly over the report's interval (the reporter does not time each step);
* ``loss/epoch``: the epoch's loss over every rank, at the step that ends the epoch;
* ``learning_rate`` and ``samples_per_s`` (every rank's, over the report's interval): once per
  report, at its step (a second report at the same step adds nothing);
* ``checkpoint/seconds`` and ``checkpoint/bytes``: each committed checkpoint, at its step.

``TRAINER_TENSORBOARD=0`` (or ``false``, ``off``) writes none.

Cost: the training thread only queues the report; a thread of this sink writes the events,
flushes and uploads. It writes them with tensorboardX's ``EventsWriter``, the synchronous
writer inside ``SummaryWriter``: ``SummaryWriter`` hands each event to a thread of its own
through a multiprocessing queue, which costs several times more per event (a step every
millisecond is a thousand events a second), and its ``flush()`` does not wait for that queue, so
an upload after it could miss the report it follows. The purge marker is the one
``SummaryWriter(purge_step=...)`` writes.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from tensorboardX.event_file_writer import EventsWriter
from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.proto.summary_pb2 import Summary

from trainer.report import CheckpointSaved, Snapshot, StepLoss
from trainer.storage import RunStorage, spool_directory

LOG = logging.getLogger("trainer")
ENABLE_ENV = "TRAINER_TENSORBOARD"
DIRECTORY = "tensorboard"  # in the run's root
# Object storage: a file this large is finished and the next begins (an upload replaces the
# whole object at every report). About 170,000 steps' losses.
ROTATE_BYTES = 8 << 20
# close() waits this long for the queued reports to be written and uploaded.
CLOSE_TIMEOUT_S = 300.0
_ON = ("", "1", "true", "on")
_OFF = ("0", "false", "off")
_last_suffix = 0
_suffix_lock = threading.Lock()


def enabled(environ: Mapping[str, str]) -> bool:
    """``TRAINER_TENSORBOARD``: unset, empty, 1, true or on write the event files; 0, false or
    off do not; anything else is a ValueError naming the variable and the values allowed."""
    raw = environ.get(ENABLE_ENV, "")
    value = raw.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(
        f"{ENABLE_ENV}={raw!r}: expected 1, true or on (the default: write TensorBoard event "
        "files) or 0, false or off (write none)"
    )


def _file_suffix() -> str:
    """A suffix that orders this process's files after each other within one second (the name's
    own time has seconds only) and keeps two processes' files apart: the time in nanoseconds,
    strictly increasing."""
    global _last_suffix
    with _suffix_lock:
        _last_suffix = max(time.time_ns(), _last_suffix + 1)
        return f".{_last_suffix:019d}"


class TensorBoardLog:
    """Rank 0's ``ReportSink`` for TensorBoard (see the module's docstring); made by
    :meth:`open`. Its methods run on the training thread and only queue work."""

    def __init__(
        self,
        directory: Path,
        purge_step: int,
        *,
        upload_to: RunStorage | None = None,
        rotate_bytes: int | None = None,
    ) -> None:
        """Write into ``directory``; with ``upload_to`` (a root in object storage) it is a
        temporary directory whose files are uploaded to the root's ``tensorboard/`` and that is
        removed at :meth:`close`."""
        self._directory = directory
        self._storage = upload_to
        self._rotate_bytes = ROTATE_BYTES if rotate_bytes is None else rotate_bytes
        self._where = upload_to.location_of(DIRECTORY) if upload_to is not None else str(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._path, self._file = self._new_file()
        # What an earlier process wrote from this step on is dropped by TensorBoard's reader.
        self._file.write_event(
            Event(
                step=purge_step,
                wall_time=time.time(),
                session_log=SessionLog(status=SessionLog.START),
            )
        )
        self._file.flush()
        self._uploaded: dict[str, int] = {}  # file name -> bytes uploaded
        self._upload_failing = False
        # Figures once per step: none at or before the checkpoint this process resumed from.
        self._snapshot_through = purge_step - 1
        self._epoch_loss_through = purge_step - 1
        self._last_time = time.time()
        self._work: list[Callable[[], None]] = []
        self._cond = threading.Condition()
        self._closing = False
        self._failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="tensorboard-log", daemon=True)
        self._thread.start()

    @classmethod
    def open(
        cls,
        storage: RunStorage,
        resumed_global_step: int | None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> TensorBoardLog | None:
        """The sink for the run in ``storage``, or None when ``TRAINER_TENSORBOARD`` turns it off
        (a ValueError when it says neither). ``resumed_global_step``: the global step of the
        checkpoint this process resumed from, None for a run that starts afresh. A directory
        that cannot be written is an OSError here, before the first step."""
        if not enabled(os.environ if environ is None else environ):
            return None
        purge_step = (resumed_global_step or 0) + 1
        local = storage.local_directory()
        if local is not None:
            return cls(local / DIRECTORY, purge_step)
        spool = Path(tempfile.mkdtemp(prefix="tensorboard-", dir=spool_directory()))
        try:
            return cls(spool, purge_step, upload_to=storage)
        except BaseException:
            shutil.rmtree(spool, ignore_errors=True)
            raise

    @property
    def location(self) -> str:
        """Where the event files are, for messages (the root's ``tensorboard/``)."""
        return self._where

    # -- ReportSink -----------------------------------------------------------------------------

    def report(self, snapshot: Snapshot, losses: Sequence[StepLoss]) -> None:
        self._submit(functools.partial(self._write_report, snapshot, tuple(losses)))

    def checkpoint_saved(self, saved: CheckpointSaved) -> None:
        self._submit(functools.partial(self._write_checkpoint, saved))

    def close(self) -> None:
        """Write what is queued, close the file and (object storage) upload the last bytes; a
        second call does nothing. Raises what went wrong: a write or the last upload that
        failed, or a writer that did not finish in ``CLOSE_TIMEOUT_S``."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify()
        self._thread.join(CLOSE_TIMEOUT_S)
        if self._thread.is_alive():
            raise TimeoutError(
                f"TensorBoard: the event writer did not finish in {CLOSE_TIMEOUT_S:.0f}s: "
                f"{self._where} may lack the last reports"
            )
        self._file.close()
        if self._storage is not None:
            try:
                self._upload()
            except OSError as error:
                raise OSError(
                    f"TensorBoard: the last upload to {self._where} failed ({error}); the event "
                    f"files are left in {self._directory}"
                ) from error
            shutil.rmtree(self._directory, ignore_errors=True)
        if self._failure is not None:
            raise self._failure

    # -- the training thread's side -------------------------------------------------------------

    def _submit(self, work: Callable[[], None]) -> None:
        if self._failure is not None:
            raise OSError(
                f"TensorBoard: writing to {self._where} failed: {self._failure}"
            ) from self._failure
        with self._cond:
            if self._closing:
                raise RuntimeError("TensorBoard: a report after close()")
            self._work.append(work)
            self._cond.notify()

    # -- the writer thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._work and not self._closing:
                    self._cond.wait()
                work, self._work = self._work, []
                closing = self._closing
            try:
                for write in work:
                    write()
                if work:
                    self._flush()
            except Exception as error:  # the next report (or close) raises it
                self._failure = error
                return
            if closing:
                return

    def _write_report(self, snapshot: Snapshot, losses: tuple[StepLoss, ...]) -> None:
        started, self._last_time = self._last_time, snapshot.time
        span = max(snapshot.time - started, 0.0)
        for index, loss in enumerate(losses, start=1):
            wall_time = started + span * index / len(losses)
            self._scalars(loss.global_step, wall_time, [("loss/step", loss.loss)])
        step = snapshot.global_step
        if step > self._snapshot_through:
            self._snapshot_through = step
            figures = [("samples_per_s", snapshot.samples_per_s)]
            if snapshot.learning_rate is not None:
                figures.append(("learning_rate", snapshot.learning_rate))
            self._scalars(step, snapshot.time, figures)
        if (
            snapshot.loss_is_global
            and snapshot.loss is not None
            and step > self._epoch_loss_through
        ):
            self._epoch_loss_through = step
            self._scalars(step, snapshot.time, [("loss/epoch", snapshot.loss)])

    def _write_checkpoint(self, saved: CheckpointSaved) -> None:
        figures = [("checkpoint/seconds", saved.seconds), ("checkpoint/bytes", saved.bytes)]
        self._scalars(saved.global_step, saved.time, figures)

    def _scalars(self, step: int, wall_time: float, figures: Iterable[tuple[str, float]]) -> None:
        values = [Summary.Value(tag=tag, simple_value=float(value)) for tag, value in figures]
        self._file.write_event(Event(step=step, wall_time=wall_time, summary=Summary(value=values)))

    def _flush(self) -> None:
        """Every event written so far to disk, then (object storage) uploaded. A failed upload
        is said once and tried again at the next report: the files keep everything meanwhile."""
        self._file.flush()
        if self._storage is None:
            return
        try:
            self._upload()
        except OSError as error:
            if not self._upload_failing:
                LOG.warning(
                    "TensorBoard: uploading to %s failed (%s); trying again at each report",
                    self._where,
                    error,
                )
            self._upload_failing = True
            return
        if self._upload_failing:
            LOG.info("TensorBoard: uploads to %s work again", self._where)
            self._upload_failing = False
        if self._path.stat().st_size >= self._rotate_bytes:
            # Uploaded whole just now; closing adds nothing to it.
            self._file.close()
            finished = self._path
            self._path, self._file = self._new_file()
            finished.unlink()
            self._uploaded.pop(finished.name, None)

    def _upload(self) -> None:
        """Each file of the directory whose size changed since its last upload, whole."""
        assert self._storage is not None
        for path in sorted(self._directory.glob("*tfevents*")):
            if self._uploaded.get(path.name) == path.stat().st_size:
                continue
            data = path.read_bytes()
            self._storage.write(
                f"{DIRECTORY}/{path.name}", lambda sink, data=data: sink.write(data)
            )
            self._uploaded[path.name] = len(data)

    def _new_file(self) -> tuple[Path, EventsWriter]:
        suffix = _file_suffix()
        writer = EventsWriter(str(self._directory / "events"), suffix)
        (path,) = self._directory.glob(f"events.out.tfevents.*{suffix}")
        return path, writer
