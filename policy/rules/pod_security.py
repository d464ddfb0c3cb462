"""Least privilege for the job's pods: Pod Security "restricted", one rule per requirement of the
profile (kubernetes.io/docs/concepts/security/pod-security-standards, "Restricted"), on every pod
template of either job API, each message naming the field to set; the service account token the
pods need not hold; and running as root, which only a stack that says so does.

Why the pack checks what the API server enforces: the API server enforces it only in namespaces
labelled `pod-security.kubernetes.io/enforce: restricted`, and only when the job's controller
creates the pods, after `pulumi up` created the job; a reviewer should see the pods' privileges
before any of that. The pods' identity comes from the stack settings `job.securityContext` and
`job.runAsRoot`; the rest the program always sets.

Where each field is: a pod's `securityContext` (runAsNonRoot, runAsUser, runAsGroup,
seccompProfile) may be set for the whole pod or on every container, as the profile allows;
`allowPrivilegeEscalation` and `capabilities` exist only on containers, init containers included.
A pod whose securityContext says `runAsUser: 0` says it runs as root (`job.runAsRoot: true`):
`pod-security-run-as-root` reports it, advisory unless a stack's config makes it mandatory, and
the two non-root rules leave that pod to it. What the controllers add to the pods (the training
operator's init container in a PyTorchJob's Workers) is not in the stack and not checked here;
neither is a cluster's ClusterTrainingRuntime. The profile's baseline controls (privileged
containers, host namespaces, ports and paths, ...) the program never sets: only `hostPath`, among
the volume types, is checked here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

from .jobs import PodSpec, job_view
from .jobs.trainjob import RUNTIME_TYPE, runtime_pod_specs
from .model import PYTORCHJOB_TYPE, Container, as_list, dig, is_unknown

RESTRICTED: Final = 'Pod Security "restricted"'
SECCOMP_TYPES: Final = ("RuntimeDefault", "Localhost")
ALLOWED_CAPABILITY: Final = "NET_BIND_SERVICE"
VOLUME_TYPES: Final = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)


def _shown(value: Any) -> str:
    return "not set" if value is None else json.dumps(value)


def _pods(
    resource_type: str, props: Mapping[str, Any]
) -> Iterator[tuple[PodSpec, list[Container]]]:
    """Each pod template of a job with its containers (init containers included)."""
    view = job_view(resource_type)
    if view is None:
        return
    containers = list(view.containers(props, True))
    for pod in view.pod_specs(props):
        yield pod, [c for c in containers if c.replica_type == pod.replica_type]


def _numeric_id(value: Any) -> bool:
    """A user or group id: a whole number (the engine's wire form makes numbers floats)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return float(value).is_integer() and value >= 0


def _pod_field(pod: PodSpec, *keys: str) -> Any:
    return dig(pod.spec, "securityContext", *keys)


def _container_field(container: Container, *keys: str) -> Any:
    return dig(container.spec, "securityContext", *keys)


def _says_root(pod: PodSpec) -> bool:
    """The pod says it runs as root: the stack's `job.runAsRoot: true`."""
    return _pod_field(pod, "runAsUser") == 0


def run_as_non_root(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """ "Running as Non-root": runAsNonRoot true for the pod (or every container), false nowhere."""
    messages: list[str] = []
    for pod, containers in _pods(resource_type, props):
        if _says_root(pod):
            continue
        value = _pod_field(pod, "runAsNonRoot")
        each = [_container_field(c, "runAsNonRoot") for c in containers]
        if is_unknown(value) or any(is_unknown(v) for v in each):
            continue
        for container, own in zip(containers, each, strict=True):
            if own is False:
                messages.append(
                    f"{container.field_path('securityContext')}.runAsNonRoot is false; remove it "
                    f"({RESTRICTED} refuses a container that may run as root)"
                )
        if value is not True and not (each and all(v is True for v in each)):
            messages.append(
                f"{pod.path}.securityContext.runAsNonRoot is {_shown(value)}; set it to true "
                f"({RESTRICTED} admits only pods that cannot run as root)"
            )
    return messages


def run_as_user(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """ "Running as Non-root user": a numeric user (and group) for the pod, root nowhere; numeric so
    that the kubelet can check runAsNonRoot whatever the image's USER is (a name it cannot)."""
    messages: list[str] = []
    for pod, containers in _pods(resource_type, props):
        if _says_root(pod):
            continue
        for key, what in (("runAsUser", "user"), ("runAsGroup", "group")):
            value = _pod_field(pod, key)
            if is_unknown(value) or _numeric_id(value):
                continue
            messages.append(
                f"{pod.path}.securityContext.{key} is {_shown(value)}; set a numeric non-root "
                f"{what} (stack setting job.securityContext.{key})"
            )
        for container in containers:
            if _container_field(container, "runAsUser") == 0:
                messages.append(
                    f"{container.field_path('securityContext')}.runAsUser is 0 (root); remove it "
                    f"or set a non-root user ({RESTRICTED})"
                )
    return messages


def seccomp_profile(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """ "Seccomp": RuntimeDefault (or Localhost) for the pod or every container, Unconfined
    nowhere."""
    messages: list[str] = []
    for pod, containers in _pods(resource_type, props):
        value = _pod_field(pod, "seccompProfile", "type")
        each = [_container_field(c, "seccompProfile", "type") for c in containers]
        if is_unknown(value) or any(is_unknown(v) for v in each):
            continue
        for container, own in zip(containers, each, strict=True):
            if own is not None and own not in SECCOMP_TYPES:
                messages.append(
                    f"{container.field_path('securityContext')}.seccompProfile.type is "
                    f"{_shown(own)}; set it to RuntimeDefault or remove it ({RESTRICTED})"
                )
        if value not in SECCOMP_TYPES and not (each and all(v in SECCOMP_TYPES for v in each)):
            messages.append(
                f"{pod.path}.securityContext.seccompProfile.type is {_shown(value)}; set it to "
                f"RuntimeDefault ({RESTRICTED})"
            )
    return messages


def no_privilege_escalation(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """ "Privilege Escalation": allowPrivilegeEscalation false on every container."""
    messages: list[str] = []
    for _pod, containers in _pods(resource_type, props):
        for container in containers:
            value = _container_field(container, "allowPrivilegeEscalation")
            if value is False or is_unknown(value):
                continue
            messages.append(
                f"{container.field_path('securityContext')}.allowPrivilegeEscalation is "
                f"{_shown(value)}; set it to false ({RESTRICTED}: no setuid binary may raise "
                "the process's privileges)"
            )
    return messages


def drop_capabilities(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """ "Capabilities": every container drops ALL and adds none but NET_BIND_SERVICE."""
    messages: list[str] = []
    for _pod, containers in _pods(resource_type, props):
        for container in containers:
            path = f"{container.field_path('securityContext')}.capabilities"
            drop = _container_field(container, "capabilities", "drop")
            add = _container_field(container, "capabilities", "add")
            if not is_unknown(drop) and "ALL" not in as_list(drop):
                messages.append(f"{path}.drop is {_shown(drop)}; set it to [ALL] ({RESTRICTED})")
            added = [c for c in as_list(add) if c != ALLOWED_CAPABILITY]
            if not is_unknown(add) and added:
                messages.append(
                    f"{path}.add adds {', '.join(map(str, added))}; remove them ({RESTRICTED} "
                    f"allows only {ALLOWED_CAPABILITY})"
                )
    return messages


def volume_types(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """ "Volume Types": only the kinds of volume that give no access to the node."""
    messages: list[str] = []
    for pod, _containers in _pods(resource_type, props):
        volumes = pod.spec.get("volumes")
        if is_unknown(volumes):
            continue
        for index, volume in enumerate(as_list(volumes)):
            kinds = [
                key for key in (volume if isinstance(volume, Mapping) else {}) if key != "name"
            ]
            refused = [kind for kind in kinds if kind not in VOLUME_TYPES]
            if refused:
                messages.append(
                    f"{pod.path}.volumes[{index}] is a {refused[0]} volume; use one of "
                    f"{', '.join(VOLUME_TYPES)} ({RESTRICTED})"
                )
    return messages


def no_service_account_token(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """automountServiceAccountToken false on the pods: training never calls the API server, and
    a compromised dependency in the image would otherwise hold the service account's token.
    A PyTorchJob's pod templates say it; a TrainJob's pods get it from their TrainingRuntime
    (a runtime patch cannot set it), so it is checked there."""
    if resource_type == PYTORCHJOB_TYPE:
        pods = [pod for pod, _ in _pods(resource_type, props)]
    elif resource_type == RUNTIME_TYPE:
        pods = list(runtime_pod_specs(props))
    else:
        return []
    messages: list[str] = []
    for pod in pods:
        value = pod.spec.get("automountServiceAccountToken")
        if value is False or is_unknown(value):
            continue
        messages.append(
            f"{pod.path}.automountServiceAccountToken is {_shown(value)}; set it to false (the "
            "pods need no API access and would hold the service account's token)"
        )
    return messages


def run_as_root(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Pods that say they run as root (`job.runAsRoot: true`)."""
    return [
        f"{pod.path}.securityContext.runAsUser is 0: the pods run as root (stack setting "
        f"job.runAsRoot: true); {RESTRICTED} refuses them, and whatever runs in the image is "
        "root in its container"
        for pod, _ in _pods(resource_type, props)
        if _says_root(pod)
    ]
