"""Plain-data view of the resources the policies inspect, and helpers to walk their manifests."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

PVC_TYPE: Final = "kubernetes:core/v1:PersistentVolumeClaim"
SECRET_TYPE: Final = "kubernetes:core/v1:Secret"
# pulumi_kubernetes.apiextensions.CustomResource registers f"kubernetes:{apiVersion}:{kind}".
PYTORCHJOB_TYPE: Final = "kubernetes:kubeflow.org/v1:PyTorchJob"
DOCKER_IMAGE_TYPE: Final = "docker:index/image:Image"

DOCKERCONFIGJSON: Final = "kubernetes.io/dockerconfigjson"
# Policies cannot see the retain_on_delete resource option (only `protect`), so the program
# declares it on the claim with this annotation, set from the same stack setting.
RETAIN_ANNOTATION: Final = "pytorch-distributed/retain-on-destroy"
REPLICA_TYPES: Final = ("Master", "Worker")


class _Unknown:
    """A value `pulumi preview` cannot know yet (e.g. the digest of an image not built yet)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown during preview>"


UNKNOWN: Final = _Unknown()


def is_unknown(value: object) -> bool:
    return value is UNKNOWN


@dataclass(frozen=True)
class Resource:
    """One registered resource as a stack policy sees it: inputs as plain data plus `protect`."""

    type: str
    name: str
    props: Mapping[str, Any]
    urn: str = ""
    protect: bool = False


@dataclass(frozen=True)
class Violation:
    message: str
    urn: str | None = None


@dataclass(frozen=True)
class Container:
    """A container of a PyTorchJob replica, with the manifest path reviewers can search for."""

    replica_type: str
    path: str
    spec: Mapping[str, Any] = field(repr=False)


def dig(value: Any, *keys: str | int) -> Any:
    """Follow keys through nested dicts/lists; None when a step is missing (UNKNOWN passes up)."""
    for key in keys:
        if is_unknown(value):
            return UNKNOWN
        if isinstance(key, int):
            if not isinstance(value, Sequence) or isinstance(value, str) or key >= len(value):
                return None
            value = value[key]
        else:
            if not isinstance(value, Mapping) or key not in value:
                return None
            value = value[key]
    return value


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return []


def replica_specs(props: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(dig(props, "spec", "pytorchReplicaSpecs"))


def replica_count(replica_spec: Any) -> int | _Unknown:
    """The operator defaults a missing `replicas` to 1."""
    replicas = dig(replica_spec, "replicas")
    if replicas is None:
        return 1
    if is_unknown(replicas):
        return UNKNOWN
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
            return UNKNOWN
        total += int(count)  # type: ignore[arg-type]
    return total


def pod_spec_path(replica_type: str) -> str:
    return f"spec.pytorchReplicaSpecs.{replica_type}.template.spec"


def pod_specs(props: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for replica_type, spec in replica_specs(props).items():
        yield replica_type, as_mapping(dig(spec, "template", "spec"))


def containers(props: Mapping[str, Any], *, include_init: bool = False) -> Iterator[Container]:
    groups = ("containers", "initContainers") if include_init else ("containers",)
    for replica_type, pod in pod_specs(props):
        for group in groups:
            for index, container in enumerate(as_list(pod.get(group))):
                path = f"{pod_spec_path(replica_type)}.{group}[{index}]"
                yield Container(replica_type, path, as_mapping(container))


def claim_names(props: Mapping[str, Any]) -> set[str]:
    """Names of the PersistentVolumeClaims the job's pods mount."""
    names: set[str] = set()
    for _, pod in pod_specs(props):
        for volume in as_list(pod.get("volumes")):
            name = dig(volume, "persistentVolumeClaim", "claimName")
            if isinstance(name, str):
                names.add(name)
    return names


def metadata_name(props: Mapping[str, Any]) -> Any:
    return dig(props, "metadata", "name")


def metadata_namespace(props: Mapping[str, Any]) -> Any:
    namespace = dig(props, "metadata", "namespace")
    return "default" if namespace is None else namespace


def find_named(resources: list[Resource], name: str, namespace: Any) -> Resource | None:
    """The resource with this metadata.name in this namespace (either side unknown matches)."""
    for resource in resources:
        other = metadata_namespace(resource.props)
        same_namespace = is_unknown(namespace) or is_unknown(other) or other == namespace
        if metadata_name(resource.props) == name and same_namespace:
            return resource
    return None


def flag(config: Mapping[str, Any], key: str) -> bool:
    """A boolean policy-config switch; only a real `true` opts out, never a truthy string."""
    return config.get(key) is True
