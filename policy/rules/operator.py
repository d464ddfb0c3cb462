"""The Kubeflow training operator's own rules for a PyTorchJob, checked before it rejects the job.

The operator accepts the object (it is a CustomResource, so the API server validates little) and
only then fails it, after GPUs may already have been reserved for the pods. Checking here keeps a
broken job out of the cluster. What the CRD's schema rejects at apply time (a non-string
`nprocPerNode`) is checked too, since by then the stack's other resources already exist.

`admission_violations` is the one statement of these rules: the pack applies it to what the
engine registers, and the manifest tests apply it to what the builders produce.

An elastic job (`spec.elasticPolicy`) needs a Worker replica spec (the rendezvous runs on
`<job>-worker-0`; a Master is optional then), must not set the deprecated
`elasticPolicy.nProcPerNode` beside `spec.nprocPerNode` (the webhook's two rules), and, beyond
the webhook, is held to what makes it work: a node range of at least 1 with min <= max <= the
pods the job has, a rendezvous backend torchrun knows, and a gang minimum
(`runPolicy.schedulingPolicy.minAvailable`) no larger than the fewest nodes it trains on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .model import (
    PYTORCHJOB_TYPE,
    REPLICA_TYPES,
    as_list,
    dig,
    is_unknown,
    metadata_name,
    pod_count,
    pod_spec_path,
    replica_count,
    replica_specs,
)

CONTAINER_NAME: Final = "pytorch"
RDZV_BACKENDS: Final = ("c10d", "etcd", "etcd-v2")
RESTART_POLICIES: Final = ("Always", "OnFailure", "Never", "ExitCode")
# The operator's webhook: the job name becomes the prefix of its pods' Service names.
_DNS1035_LABEL: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_MAX: Final = 63


def pytorchjob_operator_shape(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != PYTORCHJOB_TYPE:
        return []
    return admission_violations(props)


def admission_violations(job: Mapping[str, Any]) -> list[str]:
    """Why the operator (or the CRD's schema) would refuse this PyTorchJob; empty when admitted.

    Values unknown during preview are skipped, so a plain manifest is checked in full."""
    messages = _job_messages(job)
    specs = replica_specs(job)
    if not specs:
        return [*messages, "spec.pytorchReplicaSpecs is missing: the job starts no pods"]
    messages += [
        f"spec.pytorchReplicaSpecs.{name} is not a PyTorchJob replica type "
        f"(allowed: {', '.join(REPLICA_TYPES)})"
        for name in specs
        if name not in REPLICA_TYPES
    ]
    elastic = dig(job, "spec", "elasticPolicy")
    if elastic is not None:
        messages += _elastic_messages(job, elastic, specs)
    elif "Master" not in specs:
        messages.append("spec.pytorchReplicaSpecs.Master is missing: rank 0 runs on the Master")
    else:
        master_replicas = replica_count(specs["Master"])
        if not is_unknown(master_replicas) and master_replicas != 1:
            messages.append(
                f"spec.pytorchReplicaSpecs.Master.replicas is {master_replicas}; "
                "the operator requires exactly 1"
            )
    worker = specs.get("Worker")
    if worker is not None:
        worker_replicas = replica_count(worker)
        if not is_unknown(worker_replicas) and int(worker_replicas) < 1:  # type: ignore[arg-type]
            messages.append(
                f"spec.pytorchReplicaSpecs.Worker.replicas is {worker_replicas}; "
                "omit Worker for a single-node job instead"
            )
    for replica_type in specs:
        messages.extend(_replica_messages(replica_type, specs[replica_type]))
    return messages


def _job_messages(job: Mapping[str, Any]) -> list[str]:
    messages: list[str] = []
    name = metadata_name(job)
    if isinstance(name, str) and (len(name) > _LABEL_MAX or not _DNS1035_LABEL.match(name)):
        messages.append(
            f"metadata.name {name!r} is not a DNS-1035 label (lowercase letters, digits and '-', "
            f"starting with a letter, at most {_LABEL_MAX} characters)"
        )
    nproc = dig(job, "spec", "nprocPerNode")
    if nproc is not None and not is_unknown(nproc) and not isinstance(nproc, str):
        messages.append(
            f"spec.nprocPerNode is {nproc!r}, not a string; the PyTorchJob schema takes "
            "a string such as '8' or 'auto'"
        )
    return messages


def _elastic_messages(job: Mapping[str, Any], policy: Any, specs: Mapping[str, Any]) -> list[str]:
    if is_unknown(policy):
        return []
    messages: list[str] = []
    if "Worker" not in specs:
        messages.append(
            "spec.pytorchReplicaSpecs.Worker is missing: the operator requires it with "
            "spec.elasticPolicy (the rendezvous runs on the job's worker-0)"
        )
    if dig(policy, "nProcPerNode") is not None and dig(job, "spec", "nprocPerNode") is not None:
        messages.append(
            "spec.elasticPolicy.nProcPerNode must not be used with spec.nprocPerNode "
            "(it is deprecated: set spec.nprocPerNode alone)"
        )
    backend = dig(policy, "rdzvBackend")
    if isinstance(backend, str) and backend not in RDZV_BACKENDS:
        messages.append(
            f"spec.elasticPolicy.rdzvBackend is {backend!r} (allowed: {', '.join(RDZV_BACKENDS)})"
        )
    minimum, maximum = _whole(dig(policy, "minReplicas")), _whole(dig(policy, "maxReplicas"))
    pods = _whole(pod_count(job))
    if minimum is None or maximum is None or pods is None:
        return messages  # the operator defaults a missing bound from the other (or the Workers)
    if minimum < 1:
        messages.append(f"spec.elasticPolicy.minReplicas is {minimum}; at least 1 node trains")
    if minimum > maximum:
        messages.append(f"spec.elasticPolicy.minReplicas {minimum} exceeds maxReplicas {maximum}")
    if maximum > pods:
        messages.append(
            f"spec.elasticPolicy.maxReplicas {maximum} exceeds the job's {pods} pods: the "
            "operator creates only those, so the job never reaches it"
        )
    gang = _whole(dig(job, "spec", "runPolicy", "schedulingPolicy", "minAvailable"))
    if gang is not None and gang > minimum:
        messages.append(
            f"spec.runPolicy.schedulingPolicy.minAvailable {gang} exceeds "
            f"spec.elasticPolicy.minReplicas {minimum}: a gang scheduler would hold the job "
            f"until {gang} pods fit, though it trains on {minimum}"
        )
    return messages


def _whole(value: Any) -> int | None:
    """A count as the engine sends it (numbers arrive as floats on the wire); None when it is
    missing, unknown during preview, or not a whole number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if float(value).is_integer() else None


def _replica_messages(replica_type: str, spec: Any) -> list[str]:
    messages: list[str] = []
    restart_policy = dig(spec, "restartPolicy")
    if isinstance(restart_policy, str) and restart_policy not in RESTART_POLICIES:
        messages.append(
            f"spec.pytorchReplicaSpecs.{replica_type}.restartPolicy is {restart_policy!r} "
            f"(allowed: {', '.join(RESTART_POLICIES)})"
        )
    containers = dig(spec, "template", "spec", "containers")
    if is_unknown(containers):
        return messages
    names = [dig(container, "name") for container in as_list(containers)]
    if any(is_unknown(name) for name in names):
        return messages
    if CONTAINER_NAME not in names:
        messages.append(
            f"{pod_spec_path(replica_type)}.containers has no container named "
            f"{CONTAINER_NAME!r} (found {names}); the operator injects the rendezvous "
            "environment only into that one"
        )
    return messages
