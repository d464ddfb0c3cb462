"""The job's PodMonitor (`metrics.podMonitor`): it has the Prometheus Operator scrape the port
`metrics` of the job's pods, where rank 0 serves Prometheus' /metrics (`metrics.enabled`).

A PodMonitor, not a ServiceMonitor: the stack declares no Service in front of the job's pods (the
controllers' own Services are theirs), and a PodMonitor selects the pods themselves, by the same
selector as the job's NetworkPolicy (`job_pods`: one statement of which pods are the job's, for
whichever job API runs them). The port is named, not numbered: a pod without the container port
`metrics` gives Prometheus no target. Every pod of the job has it (rank 0's pod is not known
before the rendezvous in an elastic job), so Prometheus has a target per pod: rank 0's serves the
run's figures, the trainer's first process on every other pod an empty page (trainer/loop.py).

It is a custom resource of the Prometheus Operator (`monitoring.coreos.com/v1`): the cluster needs
the Operator's PodMonitor CRD (docs/how-to/prometheus.md), and a Prometheus whose
`podMonitorSelector` and `podMonitorNamespaceSelector` select it (stack-wide `labels` reach it,
as they reach the job).
"""

from __future__ import annotations

from typing import Any

from builders.manifests import METRICS_PORT_NAME, object_metadata, resource_names
from builders.network_policy import job_pods
from settings.stack import StackSettings

API_VERSION = "monitoring.coreos.com/v1"
KIND = "PodMonitor"
METRICS_PATH = "/metrics"


def pod_monitor_name(settings: StackSettings) -> str:
    return f"{resource_names(settings).job}-metrics"


def pod_monitor_manifest(settings: StackSettings) -> dict[str, Any] | None:
    """The job's PodMonitor; None unless `metrics.enabled` and `metrics.podMonitor` (the
    settings refuse a PodMonitor without the metrics it scrapes)."""
    metrics = settings.metrics
    if not (metrics.enabled and metrics.pod_monitor):
        return None
    endpoint = {"port": METRICS_PORT_NAME, "path": METRICS_PATH, "interval": metrics.interval}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": object_metadata(settings, pod_monitor_name(settings), "metrics"),
        # No namespaceSelector: a PodMonitor finds pods of its own namespace, the job's.
        "spec": {"selector": job_pods(settings), "podMetricsEndpoints": [endpoint]},
    }
