"""Where and when a checkpoint is committed: inline, by a writer process, or by a writer
thread, whichever stalls the training loop less. The commit itself (object, manifest, snapshot,
retention, on whichever storage backend) is the store's
(:class:`trainer.checkpoint.CheckpointStore`); this module owns only
the machinery around it: the writer process and its pipe, the staging buffers it reads
(``trainer.staging``), the thread fallback, and the policy that picks between them. Either way
the loop never waits longer than a synchronous save.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.spawn
import os
import signal
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing

from trainer.checkpoint import CheckpointEntry, CheckpointError, CheckpointStore, CommitRecord
from trainer.staging import (
    STAGING_THREADS,
    copy_in_parallel,
    copy_to_cpu,
    move_to_shared_memory,
    state_bytes,
)
from trainer.write_failure import WriteFailure

# The write policy's two knobs (see CheckpointWriter). A state this large is handed to a writer
# process from the first save; below it, a save is written inline until one inline write takes
# longer than INLINE_BUDGET_S, measured.
BACKGROUND_MIN_BYTES = 64 << 20
INLINE_BUDGET_S = 0.25

LOG = logging.getLogger("trainer")
# Starts the writer's interpreter with SIGINT and SIGTERM ignored (see _start_writer).
WRITER_PYTHON = Path(__file__).with_name("writer-python.sh")
WRITER_PYTHON_VARIABLE = "TRAINER_WRITER_PYTHON"


def _writer_process_main(conn: Any, store: CheckpointStore) -> None:
    """Commits snapshots sent by the trainer. A separate process, because torch.save holds the
    GIL while it writes: on a thread it would stall the training loop almost as much as a
    synchronous save. It ignores SIGINT/SIGTERM (the trainer decides when to stop), says
    "ready" once its imports are done (until then the trainer writes inline instead of
    waiting for it), and exits when the trainer asks it to (None) or the pipe ends. A pipe
    closed while a message of ours was still unread in it (a trainer that never asked
    whether we were ready, then closed) reaches us as a reset rather than an end of file; it
    means the same: nobody will send another snapshot."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ignored since its start (_start_writer)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Hashing and serialising compete with the training loop for the same cores; the loop's
    # step time is what the job pays for, so the writer yields the CPU whenever both want it.
    with contextlib.suppress(OSError):
        os.nice(10)
    # The manifest's sha256 already guards every byte; skipping the zip's CRC32 saves a pass
    # over the data on a CPU the training loop may need.
    # (torch >= 2.6; the NGC 24.07 image ships 2.4, which always computes the CRC.)
    if hasattr(torch.serialization, "set_crc32_options"):
        torch.serialization.set_crc32_options(False)
    try:
        conn.send(("ready", None))
    except (EOFError, OSError):
        return
    # The last snapshot stays referenced until the next one arrives: the trainer stages every
    # save into the same shared-memory buffers, and while a mapping is alive torch's sharing
    # cache hands it back instead of mapping the buffers afresh and faulting every page in.
    state: Any = None
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the trainer closed the pipe (or died): nothing to write
            return
        if message is None:
            return
        state, epochs, step = message
        started = time.perf_counter()
        try:
            entry = store.commit(state, epochs, step, direct_io=True)
            reply: tuple[str, Any, float] = ("ok", asdict(entry), time.perf_counter() - started)
        except Exception as error:
            reply = ("error", f"{type(error).__name__}: {error}", 0.0)
        try:
            conn.send(reply)
        except OSError:  # the trainer is gone; a committed checkpoint stays committed
            return


class CheckpointWriter:
    """Commits checkpoints for rank 0 through ``store``, inline or in the background, whichever
    stalls less.

    A background save costs the loop a copy of the state into a (reused, shared-memory)
    staging buffer; a writer process then commits it. That only pays when the write itself is
    slow compared with the copy, and a writer process is an interpreter importing torch (1-2 s
    of CPU that training shares). So:

    * a state of at least ``background_min_bytes`` (``prepare`` or the first save tells) gets
      the writer process started at once, in the background, and its staging buffer allocated;
    * smaller states are written inline, and each inline write is timed: once one takes longer
      than ``inline_budget_s`` the writer is started for the saves that follow;
    * a save never waits for the writer to start: until it says "ready", saves are inline.

    At most one write is in flight; ``wait`` blocks until it is committed (on SIGTERM and at the
    end of training). Where shared memory is unavailable a writer thread stands in."""

    def __init__(
        self,
        store: CheckpointStore,
        *,
        background: bool = True,
        background_min_bytes: int = BACKGROUND_MIN_BYTES,
        inline_budget_s: float = INLINE_BUDGET_S,
    ) -> None:
        self.store = store
        self.background = background
        self.background_min_bytes = background_min_bytes
        self.inline_budget_s = inline_budget_s
        self._use_process = background
        self._process: Any = None
        self._conn: Any = None
        self._ready = False
        self._pending = False
        self._thread: threading.Thread | None = None
        self._failure = WriteFailure()  # a background write's error, raised by wait()
        self._staging: dict[str, Any] | None = None  # the last committed copy, reused
        # Threads for the staging copy (started on first use), none where one core is all
        # this process may use.
        threads = min(len(os.sched_getaffinity(0)), STAGING_THREADS)
        self._copy_pool = (
            ThreadPoolExecutor(threads, thread_name_prefix="checkpoint-staging")
            if threads > 1
            else None
        )
        self.last_committed: CheckpointEntry | None = None
        self.last_mode: str | None = None  # "inline" | "background": how the last save went
        # Commits not yet taken by the progress reports (take_commits); the thread fallback
        # appends from its own thread, which a list's append and swap tolerate.
        self._new_commits: list[CommitRecord] = []

    # -- policy -------------------------------------------------------------------------------

    def prepare(self, state: Mapping[str, Any]) -> None:
        """Called before training with a state shaped like the checkpoints to come: a large one
        starts the writer now and allocates the staging copy, so even the first save only
        copies into it. Called again after the first step, when optimizers have created their
        lazy slots (momentum, Adam moments: often as large as the model), it allocates only
        what is missing; without that the first save would allocate them inside the loop."""
        if self._pending or self._thread is not None:
            return  # the staging buffers are being written out; never overwrite them
        if self.background and state_bytes(state) >= self.background_min_bytes:
            self._start_writer()
            if self._use_process:
                self._stage(state)

    @property
    def writer_started(self) -> bool:
        return self._conn is not None

    def writer_ready(self) -> bool:
        """True once saves can be handed over (the writer process said "ready")."""
        if not self._use_process:
            return self.background and self._staging is not None  # the thread fallback
        if self._conn is None:
            return False
        if not self._ready:
            try:
                if self._conn.poll():
                    status, _ = self._conn.recv()
                    self._ready = status == "ready"
            except (EOFError, OSError):
                LOG.warning("checkpoint writer process died while starting: writing inline")
                self._abandon_writer()
        return self._ready

    # -- saving -------------------------------------------------------------------------------

    def save(
        self,
        state: Mapping[str, Any],
        *,
        epochs_completed: int,
        step_in_epoch: int,
        final: bool = False,
    ) -> None:
        """``final``: nothing trains after this save (end of training, SIGTERM), so it is
        committed right here; handing it over would only add a copy."""
        self.wait()  # the previous write is committed, so its buffers are free to reuse
        size = state_bytes(state)
        if self.background and not final and size >= self.background_min_bytes:
            self._start_writer()
        if self.background and not final and self.writer_ready():
            snapshot = self._stage(state)
            if self._use_process:
                try:
                    self._conn.send((snapshot, epochs_completed, step_in_epoch))
                    self._pending = True
                    self.last_mode = "background"
                    return
                except (OSError, RuntimeError) as error:
                    LOG.warning("checkpoint writer process unavailable (%s): writing inline", error)
                    self._abandon_writer()
            else:
                self._thread = threading.Thread(
                    target=self._failure.run,
                    args=(
                        partial(self._commit_in_thread, snapshot, epochs_completed, step_in_epoch),
                    ),
                    name="checkpoint-writer",
                )
                self._thread.start()
                self.last_mode = "background"
                return
        started = time.perf_counter()
        try:
            entry = self.store.commit(state, epochs_completed, step_in_epoch)
        except (OSError, RuntimeError) as error:
            raise CheckpointError(f"checkpoint write failed: {error}") from error
        self._committed(entry, time.perf_counter() - started)
        self.last_mode = "inline"
        if self.background and time.perf_counter() - started > self.inline_budget_s:
            self._start_writer()  # measured: inline writes now cost more than a handover

    def _stage(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Copy into the staging buffers (shared memory for the writer process)."""
        copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        try:
            snapshot = copy_to_cpu(
                dict(state), self._staging, shared=self._use_process, deferred=copies
            )
            copy_in_parallel(copies, self._copy_pool)
            if self._use_process:
                move_to_shared_memory(snapshot)
        except (OSError, RuntimeError) as error:  # e.g. a tiny /dev/shm in a bare container
            LOG.warning("no shared memory for checkpoints (%s): writing from a thread", error)
            self._abandon_writer()
            snapshot = copy_to_cpu(dict(state), self._staging)
        self._staging = snapshot
        return snapshot

    def _start_writer(self) -> None:
        if self._conn is not None or not self._use_process:
            return
        context = torch.multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(
            target=_writer_process_main,
            args=(child, self.store),
            name="checkpoint-writer",
            daemon=True,
        )
        # Only a started writer is remembered: if start() fails, the thread fallback takes
        # over and close() must not wait on a process that never ran. The interpreter is
        # started through writer-python.sh, which ignores SIGINT/SIGTERM before it execs it
        # (spawn's own start keeps neither a handler nor a signal mask here).
        previous = multiprocessing.spawn.get_executable()
        os.environ[WRITER_PYTHON_VARIABLE] = os.fsdecode(previous)
        multiprocessing.spawn.set_executable(str(WRITER_PYTHON))
        try:
            process.start()
        except (OSError, RuntimeError) as error:
            LOG.warning("checkpoint writer process unavailable (%s): using a thread", error)
            self._use_process = False
            parent.close()
            return
        finally:
            multiprocessing.spawn.set_executable(previous)
            child.close()
        self._conn, self._process = parent, process

    def _abandon_writer(self) -> None:
        self._use_process = False
        self._ready = False
        if self._conn is not None:
            self._stop_writer()

    def in_flight(self) -> bool:
        if self._pending:
            return not self._conn.poll()
        return self._thread is not None and self._thread.is_alive()

    def take_commits(self) -> list[CommitRecord]:
        """The commits since the last call, collecting a background write that has finished
        (without waiting for one that has not; its failure is raised by the next ``wait``)."""
        if self._pending and self._conn.poll():
            self._collect()
        taken, self._new_commits = self._new_commits, []
        return taken

    def _collect(self) -> None:
        """The writer process's answer for the write in flight."""
        self._pending = False
        try:
            status, payload, seconds = self._conn.recv()
        except EOFError:
            status, payload, seconds = "error", "the checkpoint writer process died", 0.0
        if status == "ok":
            self._committed(CheckpointEntry.from_json(payload), seconds)
        else:
            self._failure.record(CheckpointError(payload))

    def wait(self) -> None:
        if self._pending:
            self._collect()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._failure.raise_if_any()

    def close(self) -> None:
        """Wait for the write in flight, then let the writer process exit."""
        try:
            self.wait()
        finally:
            if self._copy_pool is not None:
                self._copy_pool.shutdown()
                self._copy_pool = None
            if self._conn is not None:
                self._stop_writer()

    def _stop_writer(self) -> None:
        """Ask the writer to exit and wait for it, then close the pipe: closed first, with the
        writer's "ready" still unread in it, the pipe would reach the writer as a reset."""
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self._process.join(timeout=60)
        self._conn.close()
        self._conn = self._process = None

    def _committed(self, entry: CheckpointEntry, seconds: float) -> None:
        self.last_committed = entry
        self._new_commits.append(CommitRecord(entry, seconds, time.time()))
        where = self.store.storage.location_of(entry.file)
        LOG.info("checkpoint committed: %s (%d bytes)", where, entry.size)

    def _commit_in_thread(self, state: dict[str, Any], epochs: int, step: int) -> None:
        """The thread fallback's write (its failure is kept by ``_failure`` for ``wait``)."""
        started = time.perf_counter()
        entry = self.store.commit(state, epochs, step, direct_io=True)
        self._committed(entry, time.perf_counter() - started)
