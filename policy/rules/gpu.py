"""Every training container asks for exactly the GPUs torchrun will use, and sets limits.

Which resource is a GPU: the job's `pytorch-distributed/gpu-resource` annotation (the stack's
`job.gpuResource`: a MIG slice such as `nvidia.com/mig-1g.10gb`, `amd.com/gpu`), else NVIDIA's
`nvidia.com/gpu`.

torchrun starts `nprocPerNode` processes per pod, one per GPU; a pod with fewer GPUs crashes with
an invalid device ordinal, a pod with more books GPUs nobody uses. Kubernetes needs GPU requests
equal to limits (extended resources cannot be overcommitted), so both are compared. A job that
asks for no GPU anywhere is a CPU (gloo) job and is checked for the rest only.

Limits: a memory limit is required (without one a leaking data loader takes the node's memory and
the kubelet evicts neighbours mid-epoch); CPU is required as a request, not a limit, because a CPU
limit throttles data-loader workers and NCCL progress threads without protecting anyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .jobs import JobView, job_view
from .model import DEFAULT_GPU_RESOURCE, GPU_RESOURCE_ANNOTATION, Container, dig, is_unknown

REQUIRED: Final = (("limits", "memory"), ("requests", "cpu"), ("requests", "memory"))


def gpu_requests_match_nproc(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    view = job_view(resource_type)
    if view is None:
        return []
    training = [
        c for c in view.containers(props, False) if c.spec.get("name") == view.training_container
    ]
    if not training:
        return []  # pytorchjob-operator-shape reports the missing container
    gpu = gpu_resource(props)
    gpu_job = any(
        _gpu_quantity(c, "limits", gpu) or _gpu_quantity(c, "requests", gpu) for c in training
    )
    messages: list[str] = []
    nproc: int | None = None
    if gpu_job:
        nproc, problem = _nproc_per_node(view, props)
        if problem:
            messages.append(problem)
    for container in training:
        messages.extend(_limit_messages(container))
        if gpu_job and nproc is not None:
            messages.extend(_gpu_messages(container, nproc, view.nproc_per_node(props)[1], gpu))
    return messages


def gpu_resource(props: Mapping[str, Any]) -> str:
    """The resource the job's GPUs are asked as: its annotation's, else NVIDIA's."""
    named = dig(props, "metadata", "annotations", GPU_RESOURCE_ANNOTATION)
    return named if isinstance(named, str) and named else DEFAULT_GPU_RESOURCE


def _nproc_per_node(view: JobView, props: Mapping[str, Any]) -> tuple[int | None, str | None]:
    value, path = view.nproc_per_node(props)
    if is_unknown(value):
        return None, None
    try:
        nproc = int(value)
    except (TypeError, ValueError):
        return None, (
            f"{path} is {value!r}; a GPU job needs an explicit number of processes "
            "per node so it can be compared with the GPUs each pod requests"
        )
    return nproc, None


def _gpu_quantity(container: Container, section: str, gpu: str) -> Any:
    return dig(container.spec, "resources", section, gpu)


def _limit_messages(container: Container) -> list[str]:
    resources = dig(container.spec, "resources")
    if is_unknown(resources):
        return []
    messages: list[str] = []
    for section, name in REQUIRED:
        value = dig(resources, section, name)
        if value is None or value == "":
            messages.append(f"{container.field_path('resources')}.{section}.{name} is missing")
    return messages


def _gpu_messages(container: Container, nproc: int, nproc_path: str, gpu: str) -> list[str]:
    messages: list[str] = []
    limit = _gpu_quantity(container, "limits", gpu)
    request = _gpu_quantity(container, "requests", gpu)
    field = container.field_path("resources")
    if not is_unknown(limit) and _as_int(limit) != nproc:
        messages.append(
            f"{field}.limits[{gpu!r}] is {limit!r} but {nproc_path} is {nproc}; "
            "each pod must get one GPU per process"
        )
    comparable = request is not None and not is_unknown(request) and not is_unknown(limit)
    if comparable and _as_int(request) != _as_int(limit):
        messages.append(
            f"{field}.requests[{gpu!r}] is {request!r} but the limit is {limit!r}; "
            "GPU requests must equal limits"
        )
    return messages


def _as_int(quantity: Any) -> int | None:
    try:
        return int(quantity)
    except (TypeError, ValueError):
        return None
