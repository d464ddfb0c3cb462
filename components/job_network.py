"""JobNetwork: the job's NetworkPolicy (`<job>-network`, builders/network_policy.py), so that only
the job's own pods reach its rendezvous and collectives, and, when `network.egress` says so, its
pods reach only the destinations listed.

Its own component, not a field of the job's: the job waits for it (`depends_on`), so the pods
start isolated, and turning `network.policy` off removes only this object, never the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


class JobNetwork(pulumi.ComponentResource):
    """The NetworkPolicy `manifest` declares; the Kubernetes provider comes from the parent's
    `providers`."""

    policy_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        manifest: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:JobNetwork", name, None, opts)
        policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-policy",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.policy_name = policy.metadata.apply(lambda metadata: metadata.name)
        self.register_outputs({"policyName": self.policy_name})
