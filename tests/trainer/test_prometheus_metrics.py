"""The trainer's Prometheus sink (trainer/prometheus_metrics.py) over real HTTP on loopback: what
/metrics serves before and after reports and checkpoints, that its counters never go down, how
METRICS_PORT is read, and that close() gives the port back."""

from __future__ import annotations

import dataclasses
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from machine.ports import free_port
from tests.trainer.reports import JOB, SAVE, SNAPSHOT
from trainer.prometheus_metrics import PREFIX, PrometheusMetrics
from trainer.report import CheckpointSaved, StepLoss

LOOPBACK = "127.0.0.1"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def closing() -> Iterator[list[PrometheusMetrics]]:
    """Sinks to close at the module's end, all at once: a close waits for the server's loop to
    notice (up to its 0.5 s poll), which one after another would be most of this module's time."""
    sinks: list[PrometheusMetrics] = []
    yield sinks
    threads = [threading.Thread(target=sink.close) for sink in sinks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.fixture
def sink(closing: list[PrometheusMetrics]) -> PrometheusMetrics:
    """A fresh sink on a port the kernel chooses."""
    metrics = PrometheusMetrics(0, addr=LOOPBACK)
    closing.append(metrics)
    return metrics


def scrape(port: int) -> tuple[dict[str, str], Samples]:
    """Our families' types by name and their samples by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX):
            continue
        types[family.name.removeprefix(PREFIX)] = family.type
        for sample in family.samples:
            key = (sample.name.removeprefix(PREFIX), tuple(sorted(sample.labels.items())))
            samples[key] = sample.value
    return types, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted({"job_name": JOB, **labels}.items())))]


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def test_before_the_first_report_every_family_is_served_without_samples(
    sink: PrometheusMetrics,
) -> None:
    types, samples = scrape(sink.port)
    assert samples == {}
    assert types["global_steps"] == "counter"
    assert types["checkpoint_save_seconds"] == "histogram"
    assert types["loss"] == "gauge"


def test_a_report_serves_the_snapshot_with_the_job_label(sink: PrometheusMetrics) -> None:
    sink.report(SNAPSHOT, [StepLoss(129, 0.5), StepLoss(130, 0.4)])
    types, samples = scrape(sink.port)

    assert all(dict(labels).get("job_name") == JOB for _, labels in samples)
    expected = {
        "global_steps_total": 130,
        "samples_total": 8320,
        "samples_per_second": 1234.5,
        "loss": 0.42,
        "loss_is_global": 0,
        "epoch": 2,
        "epochs": 5,
        "progress_ratio": 130 / 500,
        "learning_rate": 0.001,
        "eta_seconds": 61,
        "world_size": 4,
        "restarts": 1,
        "resumed": 1,
        "done": 0,
        "last_report_timestamp_seconds": 1_700_000_000.5,
        "checkpoint_saves_total": 0,
        "checkpoint_written_bytes_total": 0,
        "checkpoint_save_seconds_count": 0,
        "checkpoint_save_seconds_sum": 0,
    }
    for name, want in expected.items():
        assert value(samples, name) == pytest.approx(want), name
    assert types["global_steps"] == types["samples"] == "counter"
    # No checkpoint known yet: the last checkpoint's gauges have no sample rather than a zero.
    assert not {n for n in names(samples) if n.startswith("checkpoint_last_")}


def test_unknown_figures_have_no_sample_and_the_end_of_the_run_shows(
    sink: PrometheusMetrics,
) -> None:
    sink.report(
        dataclasses.replace(
            SNAPSHOT, loss=None, learning_rate=None, eta_s=None, loss_is_global=True, done=True
        ),
        [],
    )
    _, samples = scrape(sink.port)
    assert {"loss", "learning_rate", "eta_seconds"}.isdisjoint(names(samples))
    assert value(samples, "done") == 1
    assert value(samples, "loss_is_global") == 1


def test_checkpoints_count_their_seconds_and_bytes(sink: PrometheusMetrics) -> None:
    later = CheckpointSaved(
        epoch=2, step=0, global_step=200, seconds=12.0, bytes=3_000_000, time=1_700_000_100.0
    )
    sink.checkpoint_saved(SAVE)  # before the first report: served with it
    sink.report(SNAPSHOT, [])
    sink.checkpoint_saved(later)
    _, samples = scrape(sink.port)

    assert value(samples, "checkpoint_saves_total") == 2
    assert value(samples, "checkpoint_written_bytes_total") == 4_000_000
    assert value(samples, "checkpoint_save_seconds_count") == 2
    assert value(samples, "checkpoint_save_seconds_sum") == pytest.approx(12.3)
    assert value(samples, "checkpoint_save_seconds_bucket", le="0.1") == 0
    assert value(samples, "checkpoint_save_seconds_bucket", le="0.5") == 1
    assert value(samples, "checkpoint_save_seconds_bucket", le="10.0") == 1
    assert value(samples, "checkpoint_save_seconds_bucket", le="30.0") == 2
    assert value(samples, "checkpoint_save_seconds_bucket", le="+Inf") == 2
    assert value(samples, "checkpoint_last_save_seconds") == 12.0
    assert value(samples, "checkpoint_last_bytes") == 3_000_000
    assert value(samples, "checkpoint_last_timestamp_seconds") == 1_700_000_100.0
    assert value(samples, "checkpoint_last_global_step") == 200


def test_a_resumed_run_shows_the_checkpoint_it_started_from(sink: PrometheusMetrics) -> None:
    sink.report(dataclasses.replace(SNAPSHOT, last_checkpoint=SAVE), [])
    _, samples = scrape(sink.port)
    assert value(samples, "checkpoint_last_global_step") == 100
    assert value(samples, "checkpoint_last_timestamp_seconds") == SAVE.time
    assert value(samples, "checkpoint_saves_total") == 0  # this process saved none


def test_counters_never_go_down_across_reports(sink: PrometheusMetrics) -> None:
    counters = (
        "global_steps_total",
        "samples_total",
        "checkpoint_saves_total",
        "checkpoint_written_bytes_total",
        "checkpoint_save_seconds_count",
        "checkpoint_save_seconds_sum",
    )
    # The third report carries smaller figures than the second (it should not happen); the
    # counters hold their highest value rather than show Prometheus a reset.
    steps = (10, 50, 40, 90)
    seen: dict[str, float] = dict.fromkeys(counters, 0.0)
    for i, global_step in enumerate(steps):
        sink.report(
            dataclasses.replace(SNAPSHOT, global_step=global_step, samples=global_step * 64), []
        )
        if i % 2:
            sink.checkpoint_saved(dataclasses.replace(SAVE, global_step=global_step))
        _, samples = scrape(sink.port)
        for name in counters:
            now = value(samples, name)
            assert now >= seen[name], (name, global_step)
            seen[name] = now
    assert seen["global_steps_total"] == 90
    assert seen["samples_total"] == 90 * 64
    assert seen["checkpoint_saves_total"] == 2


def test_unset_or_empty_port_means_no_metrics() -> None:
    assert PrometheusMetrics.from_environment({}) is None
    assert PrometheusMetrics.from_environment({"METRICS_PORT": ""}) is None
    assert PrometheusMetrics.from_environment({"METRICS_PORT": "  "}) is None


@pytest.mark.parametrize("text", ["metrics", "0", "65536", "-1", "9400.0", "0x2000"])
def test_a_bad_port_is_one_clear_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"METRICS_PORT.*1\.\.65535") as raised:
        PrometheusMetrics.from_environment({"METRICS_PORT": text})
    assert "\n" not in str(raised.value)
    assert repr(text) in str(raised.value)


def test_the_environment_port_serves_and_close_frees_it(closing: list[PrometheusMetrics]) -> None:
    port = free_port()
    metrics = PrometheusMetrics.from_environment({"METRICS_PORT": str(port)}, addr=LOOPBACK)
    assert metrics is not None
    assert metrics.port == port
    metrics.report(SNAPSHOT, [])
    _, samples = scrape(port)
    assert value(samples, "epoch") == 2

    # The port is taken while it serves, and free again after close (a second close is a no-op).
    with pytest.raises(OSError, match="METRICS_PORT"):
        PrometheusMetrics(port, addr=LOOPBACK)
    metrics.close()
    metrics.close()
    again = PrometheusMetrics(port, addr=LOOPBACK)
    closing.append(again)
    assert scrape(port)[1] == {}  # the new sink's, with no report yet
