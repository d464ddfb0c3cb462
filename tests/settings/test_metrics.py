"""settings/stack.py's `metrics` section (MetricsSettings) and the values it reads
(settings/values.py: Namespaces, PrometheusDuration): the defaults, the spellings `pulumi config
set --path` leaves, a program's arguments, and every refusal, one line naming the key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from settings.stack import (
    METRICS_PORT,
    SettingsError,
    load_stack_file,
    parse_args,
    parse_settings,
)
from tests.settings.config import MINIMAL, with_values

PORT_WORDS = (
    "expected a port number other than the rendezvous' 23456 (a PyTorchJob's) and 29500 (a "
    "TrainJob's): >= 1 and <= 65535"
)
NAMESPACES_WORDS = "expected a list of namespace names (DNS-1123 labels), at least one"
DURATION_WORDS = (
    "expected a Prometheus duration longer than 0, such as 15s, 1m or 1m30s (whole numbers of y, "
    "w, d, h, m, s, ms, the largest unit first, each once)"
)
POD_MONITOR_WORDS = (
    "the PodMonitor scrapes the port metrics.enabled declares: set metrics.enabled: true, or "
    "leave metrics.podMonitor out"
)
CLUSTER_RUNTIME_WORDS = (
    "not with job.clusterRuntime: the metrics port is declared on the stack's own "
    "TrainingRuntime (a TrainJob's runtime patch has no container ports, and the cluster's "
    "runtime is not the stack's to change); leave job.clusterRuntime out"
)


def metrics(**keys: Any) -> dict[str, Any]:
    return with_values(metrics=keys)


def test_by_default_there_are_no_metrics() -> None:
    settings = parse_settings(MINIMAL).metrics
    assert settings.enabled is False
    assert settings.port == METRICS_PORT == 9450
    assert settings.scrape_from == ("monitoring",)
    assert settings.pod_monitor is False
    assert settings.interval == "30s"


def test_the_committed_stacks_have_no_metrics(repo_root: Path) -> None:
    """Nothing of the stacks changes until one turns metrics on."""
    for path in sorted(repo_root.glob("Pulumi.*.yaml")):
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        assert load_stack_file(stack, repo_root).metrics.enabled is False, stack


def test_every_key_is_read_as_written() -> None:
    settings = parse_settings(
        metrics(
            enabled=True,
            port=9500,
            scrapeFrom=["monitoring", "observability"],
            podMonitor=True,
            interval="1m30s",
        )
    ).metrics
    assert (settings.enabled, settings.port, settings.pod_monitor) == (True, 9500, True)
    assert settings.scrape_from == ("monitoring", "observability")
    assert settings.interval == "1m30s"


@pytest.mark.parametrize("interval", ["15s", "500ms", "1m", "2h", "1d", "1w", "1y", "1h30m0s"])
def test_prometheus_durations_are_taken(interval: str) -> None:
    assert parse_settings(metrics(interval=interval)).metrics.interval == interval


def test_string_spellings_from_config_set_path_are_accepted() -> None:
    """`pulumi config set --path metrics.enabled true` and `... metrics.port 9500` leave
    strings when the stack file quotes them."""
    settings = parse_settings(
        metrics(enabled="true", port="9500", podMonitor="true", scrapeFrom=["monitoring"])
    ).metrics
    assert (settings.enabled, settings.port, settings.pod_monitor) == (True, 9500, True)


def test_a_stack_file_sets_the_metrics_as_config_set_path_writes_them(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/t}\n"
        "  pytorch-distributed:metrics:\n"
        "    enabled: true\n"
        "    podMonitor: 'true'\n"
        "    scrapeFrom:\n"
        "      - prometheus\n"
        "    interval: 15s\n",
        encoding="utf-8",
    )
    settings = load_stack_file("s", tmp_path).metrics
    assert (settings.enabled, settings.pod_monitor, settings.interval) == (True, True, "15s")
    assert settings.scrape_from == ("prometheus",)


def test_a_programs_arguments_are_read_as_the_config_is() -> None:
    """TrainingEnvironmentArgs by attribute names (`scrape_from`, `pod_monitor`); a program in
    another language passes its `port: 9500` through a protobuf Struct, as 9500.0."""
    settings = parse_args(
        {
            "image": {"repository": "registry.example.com/t"},
            "metrics": {
                "enabled": True,
                "port": 9500.0,
                "scrape_from": ["monitoring"],
                "pod_monitor": True,
            },
        }
    ).metrics
    assert settings.port == 9500 and isinstance(settings.port, int)
    assert settings.pod_monitor is True
    with pytest.raises(SettingsError, match=r"metrics\.port = 9500\.0: "):
        parse_settings(metrics(port=9500.0))  # a stack file's


def test_the_rendezvous_ports_are_the_job_apis() -> None:
    """The ports metrics.port may not be are the ones the job APIs' pods rendezvous on."""
    from builders.job_apis.pytorchjob import MASTER_PORT
    from builders.job_apis.trainjob import TRAINER_PORT
    from settings.stack import RENDEZVOUS_PORTS

    assert set(RENDEZVOUS_PORTS) == {MASTER_PORT, TRAINER_PORT}


# (id, values, the whole message but for the project prefix)
REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    (
        "pod-monitor-without-metrics",
        metrics(podMonitor=True),
        f"invalid config metrics.podMonitor = True: {POD_MONITOR_WORDS}",
    ),
    (
        "pod-monitor-with-metrics-off",
        metrics(enabled="false", podMonitor="true"),
        f"invalid config metrics.podMonitor = True: {POD_MONITOR_WORDS}",
    ),
    (
        "metrics-on-the-clusters-runtime",
        with_values(
            metrics={"enabled": True},
            job={"api": "trainjob", "clusterRuntime": "torch-distributed"},
        ),
        f"invalid config metrics.enabled = True: {CLUSTER_RUNTIME_WORDS}",
    ),
    ("port-zero", metrics(port=0), f"invalid config metrics.port = 0: {PORT_WORDS}"),
    ("port-too-high", metrics(port=65536), f"invalid config metrics.port = 65536: {PORT_WORDS}"),
    (
        "port-a-word",
        metrics(port="metrics"),
        f"invalid config metrics.port = 'metrics': {PORT_WORDS}",
    ),
    ("port-a-boolean", metrics(port=True), f"invalid config metrics.port = True: {PORT_WORDS}"),
    (
        "port-the-pytorchjob-rendezvous",
        metrics(enabled=True, port=23456),
        f"invalid config metrics.port = 23456: {PORT_WORDS}",
    ),
    (
        "port-the-trainjob-rendezvous",
        metrics(port="29500"),
        f"invalid config metrics.port = '29500': {PORT_WORDS}",
    ),
    (
        "scrape-from-nobody",
        metrics(scrapeFrom=[]),
        f"invalid config metrics.scrapeFrom = []: {NAMESPACES_WORDS}",
    ),
    (
        "scrape-from-a-string",
        metrics(scrapeFrom="monitoring"),
        f"invalid config metrics.scrapeFrom = 'monitoring': {NAMESPACES_WORDS}",
    ),
    (
        "scrape-from-a-bad-namespace",
        metrics(scrapeFrom=["monitoring", "Prometheus_NS"]),
        f"invalid config metrics.scrapeFrom[1] = 'Prometheus_NS': {NAMESPACES_WORDS}",
    ),
    (
        "interval-zero",
        metrics(interval="0s"),
        f"invalid config metrics.interval = '0s': {DURATION_WORDS}",
    ),
    (
        "interval-bare-zero",
        metrics(interval="0"),
        f"invalid config metrics.interval = '0': {DURATION_WORDS}",
    ),
    (
        "interval-a-number",
        metrics(interval=15),
        f"invalid config metrics.interval = 15: {DURATION_WORDS}",
    ),
    (
        "interval-a-fraction",
        metrics(interval="1.5s"),
        f"invalid config metrics.interval = '1.5s': {DURATION_WORDS}",
    ),
    (
        "interval-smallest-unit-first",
        metrics(interval="30s1m"),
        f"invalid config metrics.interval = '30s1m': {DURATION_WORDS}",
    ),
    (
        "interval-go-spelling",
        metrics(interval="1m30.5s"),
        f"invalid config metrics.interval = '1m30.5s': {DURATION_WORDS}",
    ),
    (
        "interval-empty",
        metrics(interval=""),
        f"invalid config metrics.interval = '': {DURATION_WORDS}",
    ),
    (
        "enabled-not-a-boolean",
        metrics(enabled="yes"),
        "invalid config metrics.enabled = 'yes': expected true or false",
    ),
    (
        "unknown-metrics-key",
        metrics(path="/metrics"),
        "invalid config metrics.path = '/metrics': unknown key; allowed keys are enabled, port, "
        "scrapeFrom, podMonitor, interval",
    ),
    (
        "metrics-a-boolean",
        with_values(metrics=True),
        "invalid config metrics = True: expected an object with keys enabled, port, scrapeFrom, "
        "podMonitor, interval",
    ),
    (
        "metrics-port-in-job-env",
        with_values(job={"env": {"METRICS_PORT": "9450"}}),
        "invalid config job.env.METRICS_PORT = '9450': the stack, the job's controller or "
        "torchrun sets this variable in every pod (reserved: CHECKPOINT_DIR, JOB_NAME, "
        "STACK_NAME, METRICS_PORT, PYTHONUNBUFFERED, MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, "
        "LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, JOB_COMPLETION_INDEX, HOSTNAME and "
        "PET_*, TORCHELASTIC_*)",
    ),
]


@pytest.mark.parametrize(
    ("values", "message"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_metrics_refusals_are_one_line_naming_the_key(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(values)
    refused = str(raised.value)
    assert "\n" not in refused
    assert refused == message.replace(" config ", " config pytorch-distributed:", 1)
    assert re.fullmatch(
        r"(invalid|missing) config pytorch-distributed:(metrics|job)\S* .+", refused
    )


def test_a_programs_refusal_is_the_same_line() -> None:
    with pytest.raises(SettingsError) as raised:
        parse_args(
            {"image": {"repository": "registry.example.com/t"}, "metrics": {"pod_monitor": True}}
        )
    assert str(raised.value) == (
        f"invalid config pytorch-distributed:metrics.podMonitor = True: {POD_MONITOR_WORDS}"
    )
