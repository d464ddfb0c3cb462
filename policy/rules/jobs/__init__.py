"""The policy pack's view of each job API: one module per API, as builders/job_apis has for the
program (the pack runs in its own interpreter and imports nothing of the program).

Each module has a `VIEW`: the job's Pulumi resource type, its training container's name, where
its pod specs and containers are in the resource's inputs (with the manifest paths reviewers
search for), how many pods it starts, and its processes per node. The rules (checkpoint, image,
gpu, credentials, scheduler, lifecycle) ask `job_view` and so apply to every API alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model import Container, _Unknown


@dataclass(frozen=True)
class PodSpec:
    """One pod template of a job: its replica type, manifest path and spec, and the labels its
    pods get (what a NetworkPolicy selects them by)."""

    replica_type: str
    path: str
    spec: Mapping[str, Any]
    labels: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobView:
    resource_type: str
    kind: str
    training_container: str
    pod_specs: Callable[[Mapping[str, Any]], Iterator[PodSpec]]
    # The containers of the pod specs, the training container with what the job sets on it.
    containers: Callable[[Mapping[str, Any], bool], Iterator[Container]]
    pod_count: Callable[[Mapping[str, Any]], int | _Unknown]
    # Processes per node: (value, its manifest path).
    nproc_per_node: Callable[[Mapping[str, Any]], tuple[Any, str]]
    # Where the job bounds its run time.
    active_deadline_path: tuple[str, ...]


def _views() -> dict[str, JobView]:
    from . import pytorchjob, trainjob

    return {view.resource_type: view for view in (pytorchjob.VIEW, trainjob.VIEW)}


def job_view(resource_type: str) -> JobView | None:
    """The view of a job API's resource type; None for any other resource."""
    return _views().get(resource_type)


def job_types() -> tuple[str, ...]:
    return tuple(_views())
