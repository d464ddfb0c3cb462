"""The PyTorchJob (kubeflow.org/v1) as the policies see it: its replica specs' pod templates."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from ..model import PYTORCHJOB_TYPE, Container, _Unknown, as_list, as_mapping, dig, is_unknown
from . import JobView, PodSpec

TYPE: Final = PYTORCHJOB_TYPE
CONTAINER_NAME: Final = "pytorch"
REPLICA_TYPES: Final = ("Master", "Worker")


def replica_specs(props: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(dig(props, "spec", "pytorchReplicaSpecs"))


def replica_count(replica_spec: Any) -> int | _Unknown:
    """The operator defaults a missing `replicas` to 1."""
    replicas = dig(replica_spec, "replicas")
    if replicas is None:
        return 1
    if is_unknown(replicas):
        return replicas  # type: ignore[no-any-return]
    try:
        return int(replicas)
    except (TypeError, ValueError):
        return 0


def pod_count(props: Mapping[str, Any]) -> int | _Unknown:
    """How many pods (and so, potentially, nodes) the job starts across all replica types."""
    total = 0
    for spec in replica_specs(props).values():
        count = replica_count(spec)
        if is_unknown(count):
            return count
        total += int(count)  # type: ignore[arg-type]
    return total


def pod_spec_path(replica_type: str) -> str:
    return f"spec.pytorchReplicaSpecs.{replica_type}.template.spec"


def pod_specs(props: Mapping[str, Any]) -> Iterator[PodSpec]:
    for replica_type, spec in replica_specs(props).items():
        pod = as_mapping(dig(spec, "template", "spec"))
        labels = as_mapping(dig(spec, "template", "metadata", "labels"))
        yield PodSpec(replica_type, pod_spec_path(replica_type), pod, labels)


def containers(props: Mapping[str, Any], include_init: bool = False) -> Iterator[Container]:
    groups = ("containers", "initContainers") if include_init else ("containers",)
    for pod in pod_specs(props):
        for group in groups:
            for index, container in enumerate(as_list(pod.spec.get(group))):
                path = f"{pod.path}.{group}[{index}]"
                yield Container(pod.replica_type, path, as_mapping(container))


def nproc_per_node(props: Mapping[str, Any]) -> tuple[Any, str]:
    return dig(props, "spec", "nprocPerNode"), "spec.nprocPerNode"


VIEW = JobView(
    resource_type=TYPE,
    kind="PyTorchJob",
    training_container=CONTAINER_NAME,
    pod_specs=pod_specs,
    containers=containers,
    pod_count=pod_count,
    nproc_per_node=nproc_per_node,
    active_deadline_path=("spec", "runPolicy", "activeDeadlineSeconds"),
)
