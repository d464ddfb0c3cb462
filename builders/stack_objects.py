"""Which Kubernetes objects one stack applies, and their manifests: the one answer the Pulumi
program (TrainingEnvironment) and the offline render (tools/render.py) both follow, so they cannot
disagree. Above the builders: the job's own manifest comes from its job API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from builders.job_apis import api_of_settings
from builders.manifests import (
    checkpoint_claim_manifest,
    environment_secret_manifest,
    registry_secret_manifest,
    resource_names,
    storage_secret_manifest,
)
from builders.network_policy import network_policy_manifest
from builders.pod_monitor import pod_monitor_manifest
from settings.stack import StackSettings


@dataclass(frozen=True)
class StackObjects:
    """The Kubernetes objects one stack applies; None where the stack has no such object."""

    pull_secret: dict[str, Any] | None
    claim: dict[str, Any] | None
    job: dict[str, Any]
    # The TrainingRuntime a TrainJob runs on, when the stack declares it.
    runtime: dict[str, Any] | None = None
    # The Secret holding `job.secretEnv`'s values, when there are any.
    env_secret: dict[str, Any] | None = None
    # The Secret holding the checkpoint storage's credentials (s3's keys), when it has them.
    storage_secret: dict[str, Any] | None = None
    # Who may connect to the job's pods (and whom they may reach): `network.policy`.
    network_policy: dict[str, Any] | None = None
    # The Prometheus Operator's PodMonitor of the job's pods: `metrics.podMonitor`.
    pod_monitor: dict[str, Any] | None = None

    def in_apply_order(self) -> list[dict[str, Any]]:
        """The job pulls with the Secret, reads its environment's and its storage's Secrets,
        mounts the claim and runs on its runtime, so they all come before it; its pods start
        isolated, so the NetworkPolicy comes first; and they are scraped from their start, so
        the PodMonitor comes after their prerequisites and just before the job."""
        return [
            manifest
            for manifest in (
                self.network_policy,
                self.pull_secret,
                self.env_secret,
                self.storage_secret,
                self.claim,
                self.runtime,
                self.pod_monitor,
                self.job,
            )
            if manifest is not None
        ]


def stack_objects(settings: StackSettings, *, image: Any, password: Any) -> StackObjects:
    """Which objects the stack has, and their manifests: the one answer the Pulumi program
    (TrainingEnvironment) and the offline render both follow, so they cannot disagree.

    `image` is the reference the job runs and `password` the one the pull Secret carries (the
    program's secret Outputs, the render's stand-ins); `password` is unused without a registry.
    """
    names = resource_names(settings)
    api = api_of_settings(settings)
    return StackObjects(
        # Without a registry the pods pull anonymously: there is no credential to hold.
        pull_secret=(
            registry_secret_manifest(settings, password=password)
            if names.pull_secret is not None
            else None
        ),
        # The claim the checkpoint storage has the stack create, if any (an existing claim
        # belongs to someone else: the job mounts it, the stack never owns it).
        claim=checkpoint_claim_manifest(settings),
        job=api.job_manifest(settings, image=image),
        runtime=api.runtime_manifest(settings),
        # The values are the settings' own: the program's secret Outputs, the offline REDACTED.
        env_secret=environment_secret_manifest(settings),
        # The same: the credentials as the settings hold them, secret Outputs or REDACTED.
        storage_secret=storage_secret_manifest(settings),
        network_policy=network_policy_manifest(settings),
        pod_monitor=pod_monitor_manifest(settings),
    )
