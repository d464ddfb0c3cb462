"""Rank 0's progress as Prometheus metrics, served over HTTP at ``/metrics``.

Why: the stack names a container port ``metrics`` on the trainer's pods (its number is handed to
the trainer as ``METRICS_PORT``), and Prometheus finds the pods through a PodMonitor on that port
name and scrapes the pod IP. So the server listens on every address (``0.0.0.0``), not loopback;
only the process that reports (global rank 0, ``trainer.progress``) opens it, so the other
local ranks of the same pod never compete for the port.

How often the figures change: only when the ``ProgressReporter`` hands this sink a report (by
default every 10 s, and at each epoch's end and after each checkpoint) or a committed checkpoint.
A scrape in between serves the figures of the last report again. Nothing runs per training
step: the sink keeps the latest ``Snapshot`` and its checkpoint counters in one immutable value
that a report replaces, and a custom collector turns that value into metric families on the
HTTP server's thread when Prometheus scrapes (so a scrape never takes a lock the training
thread waits on, and never sees half of a report).

Every metric is named ``pytorch_distributed_trainer_*`` (the project's name first, so the
series never collide with another exporter's ``trainer_*`` in a shared Prometheus) and carries
the label ``job_name``: the job's name (``JOB_NAME``, which the stack sets on every pod;
``Snapshot.job``). Not ``job``: Prometheus gives every target a ``job`` label of its own (the
PodMonitor's), which would rename ours to ``exported_job``. Before the first report the endpoint
answers with the families' HELP and TYPE lines and no samples: the job's name, the epochs and
the run's place are not known yet, and a zero would read as a real value (a loss of 0).

The counters count this process: a restarted process (torchrun's restart, a resumed job) starts
them again from its checkpoint's place (``global_steps``) or from zero (samples, saves, bytes),
which Prometheus' ``rate``/``increase`` read as a counter reset.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from trainer.report import CheckpointSaved, Snapshot, StepLoss

PORT_VARIABLE = "METRICS_PORT"
PREFIX = "pytorch_distributed_trainer_"
JOB_LABEL = "job_name"  # not "job": Prometheus's own target label
# Every address: Prometheus scrapes the pod IP. ("" is no address to getaddrinfo, which
# prometheus_client asks to choose the socket's family.)
ALL_ADDRESSES = "0.0.0.0"
# Upper bounds of the checkpoint save histogram's buckets, seconds: a small model's save takes
# well under a second, a sharded multi-gigabyte one minutes.
SAVE_SECONDS_BUCKETS: tuple[float, ...] = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    math.inf,
)
_PORT_TEXT = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class _Saves:
    """This process' checkpoint saves, cumulative: what the counters and the histogram serve."""

    count: int = 0
    seconds: float = 0.0
    bytes: int = 0
    # Saves at or under each bound of SAVE_SECONDS_BUCKETS (cumulative, as Prometheus wants).
    buckets: tuple[int, ...] = (0,) * len(SAVE_SECONDS_BUCKETS)

    def add(self, saved: CheckpointSaved) -> _Saves:
        return _Saves(
            count=self.count + 1,
            seconds=self.seconds + saved.seconds,
            bytes=self.bytes + saved.bytes,
            buckets=tuple(
                n + (1 if saved.seconds <= bound else 0)
                for n, bound in zip(self.buckets, SAVE_SECONDS_BUCKETS, strict=True)
            ),
        )


@dataclass(frozen=True)
class _State:
    """Everything a scrape serves. Replaced whole by the training thread and read once by the
    server's thread: assigning an attribute is atomic, so a scrape sees one report or the
    next, never a mix, without a lock."""

    snapshot: Snapshot | None = None
    # Kept apart from the snapshot so a counter never goes down when a report carries a smaller
    # figure than the one before (it should not; a scrape must not see a reset that was none).
    global_steps: int = 0
    samples: int = 0
    saves: _Saves = _Saves()
    # The newest checkpoint known: one this process saved or the snapshot's (the one a resumed
    # run started from), whichever is later in the run.
    last_checkpoint: CheckpointSaved | None = None


def _later(a: CheckpointSaved | None, b: CheckpointSaved | None) -> CheckpointSaved | None:
    """The checkpoint further into the run (by global step, then commit time)."""
    if a is None:
        return b
    if b is None:
        return a
    return b if (b.global_step, b.time) >= (a.global_step, a.time) else a


def parse_port(environ: Mapping[str, str]) -> int | None:
    """``METRICS_PORT`` as a port number, None when unset or empty (metrics off).

    Raises early and in one line: a typo in the stack's port should stop the run at its start,
    not leave a scrape target that never answers."""
    text = environ.get(PORT_VARIABLE, "").strip()
    if not text:
        return None
    port = int(text) if _PORT_TEXT.fullmatch(text) else 0
    if not 1 <= port <= 65535:
        raise ValueError(
            f"{PORT_VARIABLE}={text!r} is not a port: set it to an integer 1..65535, "
            "or leave it unset or empty to serve no metrics"
        )
    return port


def _flag(value: bool) -> float:
    return 1.0 if value else 0.0


# (name, type, help) of every family but the histogram, in the order served.
_FAMILIES: tuple[tuple[str, str, str], ...] = (
    (
        "global_steps",
        "counter",
        "Optimizer steps done in the whole run, the resumed ones included.",
    ),
    ("samples", "counter", "Samples trained by this process, every rank's."),
    (
        "samples_per_second",
        "gauge",
        "Every rank's samples per second over the last report interval.",
    ),
    ("loss", "gauge", "Mean loss over the current epoch so far (see loss_is_global)."),
    ("loss_is_global", "gauge", "1: loss is every rank's (an epoch's end); 0: rank 0's share."),
    ("epoch", "gauge", "The epoch in progress or just finished, 1-based."),
    ("epochs", "gauge", "Epochs the run trains in all."),
    ("progress_ratio", "gauge", "Share of the run's steps done, 0..1."),
    ("learning_rate", "gauge", "The optimizer's learning rate."),
    ("eta_seconds", "gauge", "Seconds left to the run's end at this process' pace."),
    ("world_size", "gauge", "Processes training together."),
    ("restarts", "gauge", "torchrun's restarts of this process group."),
    ("resumed", "gauge", "1: this process continued from a checkpoint; 0: it started the run."),
    ("done", "gauge", "1 once the last epoch finished."),
    ("last_report_timestamp_seconds", "gauge", "Unix time of the last report (stale: stuck)."),
    ("checkpoint_saves", "counter", "Checkpoints this process committed."),
    ("checkpoint_written_bytes", "counter", "Bytes of the checkpoints this process committed."),
    ("checkpoint_last_save_seconds", "gauge", "Seconds the newest checkpoint's save took."),
    ("checkpoint_last_bytes", "gauge", "Bytes of the newest checkpoint."),
    ("checkpoint_last_timestamp_seconds", "gauge", "Unix time the newest checkpoint committed."),
    ("checkpoint_last_global_step", "gauge", "Global step the newest checkpoint holds."),
)
_SAVE_SECONDS = "checkpoint_save_seconds"
_SAVE_SECONDS_HELP = "Seconds from a save call to its commit, for this process' saves."


def _values(state: _State, snapshot: Snapshot) -> dict[str, float | None]:
    """Each family's value for one state; None leaves the family without a sample (no
    learning rate, loss or ETA known yet; no checkpoint yet)."""
    s = snapshot
    last = state.last_checkpoint
    return {
        "global_steps": state.global_steps,
        "samples": state.samples,
        "samples_per_second": s.samples_per_s,
        "loss": s.loss,
        "loss_is_global": _flag(s.loss_is_global),
        "epoch": s.epoch,
        "epochs": s.epochs,
        "progress_ratio": s.fraction,
        "learning_rate": s.learning_rate,
        "eta_seconds": s.eta_s,
        "world_size": s.world_size,
        "restarts": s.restarts,
        "resumed": _flag(s.resumed),
        "done": _flag(s.done),
        "last_report_timestamp_seconds": s.time,
        "checkpoint_saves": state.saves.count,
        "checkpoint_written_bytes": state.saves.bytes,
        "checkpoint_last_save_seconds": None if last is None else last.seconds,
        "checkpoint_last_bytes": None if last is None else last.bytes,
        "checkpoint_last_timestamp_seconds": None if last is None else last.time,
        "checkpoint_last_global_step": None if last is None else last.global_step,
    }


class _SnapshotCollector(Collector):
    """Builds the metric families from the sink's latest state at scrape time."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        state = self._metrics._state  # one read: the whole scrape serves the same report
        snapshot = state.snapshot
        values = {} if snapshot is None else _values(state, snapshot)
        labels = [] if snapshot is None else [snapshot.job]
        for name, kind, doc in _FAMILIES:
            family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = family_type(PREFIX + name, doc, labels=[JOB_LABEL])
            value = values.get(name)
            if value is not None:
                family.add_metric(labels, value)
            yield family
        seconds = HistogramMetricFamily(
            PREFIX + _SAVE_SECONDS, _SAVE_SECONDS_HELP, labels=[JOB_LABEL]
        )
        if snapshot is not None:
            saves = state.saves
            buckets = zip(SAVE_SECONDS_BUCKETS, saves.buckets, strict=True)
            seconds.add_metric(labels, [(_bound(b), float(n)) for b, n in buckets], saves.seconds)
        yield seconds


def _bound(bound: float) -> str:
    """A bucket's ``le`` label as Prometheus' own histograms write it."""
    return "+Inf" if math.isinf(bound) else repr(bound)


class PrometheusMetrics:
    """A ``ReportSink`` that serves the run's progress at ``http://<addr>:<port>/metrics``.

    The server (prometheus_client's, on a daemon thread) starts with the sink and stops at
    ``close``, so a test or a restarted process in the same pod finds the port free again. It
    serves its own registry: this sink's families and the process collector (CPU, memory, open
    files, read from /proc at scrape time), none of prometheus_client's module-level globals,
    so two sinks in one process (tests) never register the same name twice."""

    def __init__(self, port: int, addr: str = ALL_ADDRESSES) -> None:
        self._state = _State()
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_SnapshotCollector(self))
        ProcessCollector(registry=self._registry)
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=self._registry)
        except OSError as err:
            raise OSError(
                err.errno, f"cannot serve metrics on {addr}:{port} ({PORT_VARIABLE}): {err}"
            ) from err
        self._closed = False
        self._close_lock = threading.Lock()

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], addr: str = ALL_ADDRESSES
    ) -> PrometheusMetrics | None:
        """The sink on ``METRICS_PORT``, or None when it is unset or empty (metrics off); the
        stack sets it on the pods whose port it names ``metrics``."""
        port = parse_port(environ)
        return None if port is None else cls(port, addr=addr)

    @property
    def port(self) -> int:
        """The port listened on (the kernel's choice when constructed with port 0)."""
        return int(self._server.server_port)

    def report(self, snapshot: Snapshot, losses: Sequence[StepLoss]) -> None:
        """Keeps the snapshot for the next scrapes; ``losses`` are left to the sinks that log
        each step (a scrape every 15-60 s cannot show them)."""
        state = self._state
        self._state = dataclasses.replace(
            state,
            snapshot=snapshot,
            global_steps=max(state.global_steps, snapshot.global_step),
            samples=max(state.samples, snapshot.samples),
            last_checkpoint=_later(state.last_checkpoint, snapshot.last_checkpoint),
        )

    def checkpoint_saved(self, saved: CheckpointSaved) -> None:
        """Counts the save; it is served from the next scrape on (with the job's label of the
        latest report, so a save before the first report shows with that report)."""
        state = self._state
        self._state = dataclasses.replace(
            state,
            saves=state.saves.add(saved),
            last_checkpoint=_later(state.last_checkpoint, saved),
        )

    def close(self) -> None:
        """Stops the server and frees the port (a restarted process binds it again at once);
        a second call does nothing. Takes up to half a second: the server's loop notices the
        stop at its next poll."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
