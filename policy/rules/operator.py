"""The Kubeflow training operator's own rules for a PyTorchJob, checked before it rejects the job.

The operator accepts the object (it is a CustomResource, so the API server validates little) and
only then fails it, after GPUs may already have been reserved for the pods. Checking here keeps a
broken job out of the cluster. What the CRD's schema rejects at apply time (a non-string
`nprocPerNode`) is checked too, since by then the stack's other resources already exist.

`admission_violations` is the one statement of these rules: the pack applies it to what the
engine registers, and the manifest tests apply it to what the builders produce.
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
    pod_spec_path,
    replica_count,
    replica_specs,
)

CONTAINER_NAME: Final = "pytorch"
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
    if "Master" not in specs:
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
