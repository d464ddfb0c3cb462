"""The TrainJob (trainer.kubeflow.org/v1alpha1, Trainer v2.3.0) as the policies see it.

Its pods are the runtime's `node` pods with the TrainJob's runtime patch (volumes, pull secrets,
affinity, the pod's securityContext, mounts) and its `spec.trainer` (image, command, args, env,
`resourcesPerNode`) on the `node` container; that container is reported at `spec.trainer`, where
the stack sets it, but for its securityContext, which is the patch's. What the runtime itself
holds (`automountServiceAccountToken`, which no patch can set) is checked on the TrainingRuntime
the stack declares (`runtime_pod_specs`); a cluster's ClusterTrainingRuntime is not in the stack.
Trainer itself refuses what `trainjob_shape` checks, but only after the stack's other resources
exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from ..model import (
    TRAINJOB_TYPE,
    Container,
    _Unknown,
    as_list,
    as_mapping,
    dig,
    is_unknown,
    metadata_name,
)
from . import JobView, PodSpec

TYPE: Final = TRAINJOB_TYPE
RUNTIME_TYPE: Final = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainingRuntime"
CONTAINER_NAME: Final = "node"
RUNTIME_KINDS: Final = ("TrainingRuntime", "ClusterTrainingRuntime")
# The torch plugin's own variables (constants.TorchRunReservedEnvNames): its webhook refuses them.
RESERVED_ENV: Final = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
_DNS1035_LABEL: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
# A runtime patch's manager: a domain-prefixed path (`<DNS-1123 subdomain>/<path>`).
_DOMAIN_PREFIXED: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9._~!$&'()*+,;=:@/%-]+\Z"
)
_TRAINER_CONTAINER_KEYS: Final = {
    "image": "image",
    "command": "command",
    "args": "args",
    "env": "env",
    "resourcesPerNode": "resources",
}


def _node_template(props: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The runtime patch's `node` pod template and its path (empty when there is none)."""
    for index, patch in enumerate(as_list(dig(props, "spec", "runtimePatches"))):
        replicated = as_list(
            dig(patch, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        )
        for job_index, entry in enumerate(replicated):
            if dig(entry, "name") == CONTAINER_NAME:
                path = (
                    f"spec.runtimePatches[{index}].trainingRuntimeSpec.template.spec."
                    f"replicatedJobs[{job_index}].template.spec.template"
                )
                return path, as_mapping(dig(entry, "template", "spec", "template"))
    return "spec.runtimePatches", {}


def _node_patch(props: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The runtime patch's `node` pod spec and its path (empty when there is none)."""
    path, template = _node_template(props)
    if not template:
        return path, {}
    return f"{path}.spec", as_mapping(template.get("spec"))


def _patched_container(props: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The runtime patch's `node` container entry and its path (the path it would have, and
    empty, when there is none)."""
    path, patch = _node_patch(props)
    entries = as_list(patch.get("containers"))
    for index, entry in enumerate(entries):
        if dig(entry, "name") == CONTAINER_NAME:
            return f"{path}.containers[{index}]", as_mapping(entry)
    return f"{path}.containers[{len(entries)}]", {}


def trainer_container(props: Mapping[str, Any]) -> dict[str, Any]:
    """The `node` container as the pods get it from `spec.trainer` and the runtime patch."""
    trainer = as_mapping(dig(props, "spec", "trainer"))
    container: dict[str, Any] = {"name": CONTAINER_NAME}
    for key, field in _TRAINER_CONTAINER_KEYS.items():
        if key in trainer:
            container[field] = trainer[key]
    _, patched = _patched_container(props)
    if "securityContext" in patched:
        container["securityContext"] = patched["securityContext"]
    return container


def pod_specs(props: Mapping[str, Any]) -> Iterator[PodSpec]:
    path, patch = _node_patch(props)
    labels = as_mapping(dig(_node_template(props)[1], "metadata", "labels"))
    yield PodSpec("node", path, {**patch, "containers": [trainer_container(props)]}, labels)


def runtime_pod_specs(props: Mapping[str, Any]) -> Iterator[PodSpec]:
    """The pod templates of a TrainingRuntime's replicated jobs (the TrainJob's pods' base)."""
    replicated = as_list(dig(props, "spec", "template", "spec", "replicatedJobs"))
    for index, entry in enumerate(replicated):
        path = f"spec.template.spec.replicatedJobs[{index}].template.spec.template.spec"
        pod = as_mapping(dig(entry, "template", "spec", "template", "spec"))
        yield PodSpec(str(dig(entry, "name") or index), path, pod)


def containers(props: Mapping[str, Any], include_init: bool = False) -> Iterator[Container]:
    renamed = {field: key for key, field in _TRAINER_CONTAINER_KEYS.items()}
    patched_path, _ = _patched_container(props)
    elsewhere = {"securityContext": f"{patched_path}.securityContext"}
    yield Container("node", "spec.trainer", trainer_container(props), renamed, elsewhere)
    if include_init:
        path, patch = _node_patch(props)
        for index, container in enumerate(as_list(patch.get("initContainers"))):
            yield Container("node", f"{path}.initContainers[{index}]", as_mapping(container))


def pod_count(props: Mapping[str, Any]) -> int | _Unknown:
    nodes = dig(props, "spec", "trainer", "numNodes")
    if nodes is None:
        return 1  # the runtime's mlPolicy.numNodes; the stack's runtimes say 1
    if is_unknown(nodes):
        return nodes  # type: ignore[no-any-return]
    try:
        return int(nodes)
    except (TypeError, ValueError):
        return 0


def nproc_per_node(props: Mapping[str, Any]) -> tuple[Any, str]:
    return dig(props, "spec", "trainer", "numProcPerNode"), "spec.trainer.numProcPerNode"


def trainjob_shape(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Why Trainer (its CRD schema or its webhook) would refuse this TrainJob; empty when not."""
    if resource_type != TYPE:
        return []
    messages: list[str] = []
    name = metadata_name(props)
    if isinstance(name, str) and (len(name) > 63 or not _DNS1035_LABEL.match(name)):
        messages.append(
            f"metadata.name {name!r} is not a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter, at most 63 characters)"
        )
    runtime = dig(props, "spec", "runtimeRef", "name")
    if runtime is None or runtime == "":
        messages.append("spec.runtimeRef.name is missing: a TrainJob runs on a runtime")
    kind = dig(props, "spec", "runtimeRef", "kind")
    if isinstance(kind, str) and kind not in RUNTIME_KINDS:
        messages.append(f"spec.runtimeRef.kind is {kind!r} (allowed: {', '.join(RUNTIME_KINDS)})")
    if dig(props, "spec", "trainer") is None:
        messages.append("spec.trainer is missing: the pods would run the runtime's own image")
    nodes = pod_count(props)
    if not is_unknown(nodes) and int(nodes) < 1:  # type: ignore[arg-type]
        messages.append(f"spec.trainer.numNodes is {nodes}; at least 1 node trains")
    for entry in as_list(dig(props, "spec", "trainer", "env")):
        env_name = dig(entry, "name")
        if env_name in RESERVED_ENV:
            messages.append(
                f"spec.trainer.env sets {env_name}, which the torch plugin sets itself "
                "(Trainer refuses the job)"
            )
    for index, entry in enumerate(as_list(dig(props, "spec", "runtimePatches"))):
        manager = dig(entry, "manager")
        if isinstance(manager, str) and not _DOMAIN_PREFIXED.match(manager):
            messages.append(
                f"spec.runtimePatches[{index}].manager {manager!r} is not a domain-prefixed path "
                "(such as 'example.com/team'): Trainer refuses the job"
            )
    path, patch = _node_patch(props)
    if not patch and dig(props, "spec", "runtimePatches") is not None:
        messages.append(
            f"{path} patches no replicated job named {CONTAINER_NAME!r}: the claim and the pull "
            "secret would not reach the trainer's pods"
        )
    return messages


VIEW = JobView(
    resource_type=TYPE,
    kind="TrainJob",
    training_container=CONTAINER_NAME,
    pod_specs=pod_specs,
    containers=containers,
    pod_count=pod_count,
    nproc_per_node=nproc_per_node,
    active_deadline_path=("spec", "activeDeadlineSeconds"),
)
