"""Plain-data view of the resources the policies inspect, and helpers to walk their manifests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

PVC_TYPE: Final = "kubernetes:core/v1:PersistentVolumeClaim"
SECRET_TYPE: Final = "kubernetes:core/v1:Secret"
# pulumi_kubernetes.apiextensions.CustomResource registers f"kubernetes:{apiVersion}:{kind}".
PYTORCHJOB_TYPE: Final = "kubernetes:kubeflow.org/v1:PyTorchJob"
TRAINJOB_TYPE: Final = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
DOCKER_IMAGE_TYPE: Final = "docker:index/image:Image"

DOCKERCONFIGJSON: Final = "kubernetes.io/dockerconfigjson"
# Policies cannot see the retain_on_delete resource option (only `protect`), so the program
# declares it on the claim with this annotation, set from the same stack setting.
RETAIN_ANNOTATION: Final = "pytorch-distributed/retain-on-destroy"
# The job's GPU resource (stack setting job.gpuResource), which the program states on the job with
# this annotation since a policy sees the manifest, not the settings; NVIDIA's without it.
GPU_RESOURCE_ANNOTATION: Final = "pytorch-distributed/gpu-resource"
DEFAULT_GPU_RESOURCE: Final = "nvidia.com/gpu"


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
    """A container of a job's pods, with the manifest path reviewers can search for."""

    replica_type: str
    path: str
    spec: Mapping[str, Any] = field(repr=False)
    # Container fields the job sets under another name (a TrainJob's `resourcesPerNode`).
    renamed: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Container fields the job sets at another place of its manifest, by their full paths (a
    # TrainJob's `node` securityContext, in its runtime patch).
    elsewhere: Mapping[str, str] = field(default_factory=dict, repr=False)

    def field_path(self, name: str) -> str:
        """The manifest path of the container's field `name`."""
        if name in self.elsewhere:
            return self.elsewhere[name]
        return f"{self.path}.{self.renamed.get(name, name)}"


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


def claim_names(pod_specs: Iterable[Mapping[str, Any]]) -> set[str]:
    """Names of the PersistentVolumeClaims these pod specs mount."""
    names: set[str] = set()
    for pod in pod_specs:
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
