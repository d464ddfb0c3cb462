"""JobMetrics: the job's PodMonitor (`<job>-metrics`, builders/pod_monitor.py), which has the
Prometheus Operator scrape the port `metrics` of the job's pods, where rank 0 serves Prometheus'
/metrics (`metrics.enabled`, `metrics.podMonitor`).

Its own component, created only with `metrics.podMonitor`: the job waits for it (`depends_on`),
so Prometheus scrapes the pods from their start, and a cluster without the Operator's PodMonitor
CRD fails `pulumi up` at this object, before the job exists (the provider's "no matches for kind
PodMonitor"); turning `metrics.podMonitor` off removes only this object, never the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


class JobMetrics(pulumi.ComponentResource):
    """The PodMonitor `manifest` declares, a custom resource of the Prometheus Operator; the
    Kubernetes provider comes from the parent's `providers`."""

    pod_monitor_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        manifest: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:JobMetrics", name, None, opts)
        monitor = k8s.apiextensions.CustomResource(
            f"{name}-podmonitor",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self),
        )
        # A custom resource's outputs are plain objects: its metadata is a mapping.
        self.pod_monitor_name = monitor.metadata.apply(lambda metadata: str(metadata["name"]))
        self.register_outputs({"podMonitorName": self.pod_monitor_name})
