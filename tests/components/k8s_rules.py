"""Schema checks for the manifests the stack applies, shared by the builder and program tests.

Core kinds are validated against the real Kubernetes OpenAPI schemas (kubernetes-validate, strict:
unknown fields fail). A PyTorchJob is a custom resource, so its pod templates are validated as a
core PodTemplate and the rest against the training operator's admission-webhook rules (only
Master/Worker replica types, a container named `pytorch` in each, Master replicas exactly 1,
workers at least 1, a DNS-1035 job name, a string nprocPerNode).
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate

KUBERNETES_VERSION = "1.34.0"
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def validate_core(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def pytorchjob_violations(manifest: dict[str, Any]) -> list[str]:
    """The training operator's webhook rules a PyTorchJob breaks (empty when it is admitted)."""
    problems: list[str] = []
    name = manifest.get("metadata", {}).get("name", "")
    if len(name) > 63 or not _DNS1035.match(name):
        problems.append(f"metadata.name {name!r} is not a DNS-1035 label")
    spec = manifest.get("spec", {})
    replica_specs = spec.get("pytorchReplicaSpecs") or {}
    if not replica_specs:
        problems.append("spec.pytorchReplicaSpecs is empty")
    for replica_type, replica in replica_specs.items():
        if replica_type not in ("Master", "Worker"):
            problems.append(f"replica type {replica_type} is not Master or Worker")
        replicas = replica.get("replicas")
        if replica_type == "Master" and replicas != 1:
            problems.append(f"Master replicas must be 1, got {replicas}")
        if replica_type == "Worker" and replicas is not None and replicas < 1:
            problems.append(f"Worker replicas must be at least 1, got {replicas}")
        containers = replica.get("template", {}).get("spec", {}).get("containers", [])
        if "pytorch" not in [container.get("name") for container in containers]:
            problems.append(f"{replica_type} has no container named pytorch")
    if "nprocPerNode" in spec and not isinstance(spec["nprocPerNode"], str):
        problems.append("spec.nprocPerNode must be a string")
    return problems


def validate_pytorchjob(manifest: dict[str, Any]) -> None:
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "PyTorchJob"
    problems = pytorchjob_violations(manifest)
    assert not problems, problems
    for replica_type, replica in manifest["spec"]["pytorchReplicaSpecs"].items():
        validate_core(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"{manifest['metadata']['name']}-{replica_type.lower()}"},
                "template": replica["template"],
            }
        )


def validate_manifest(manifest: dict[str, Any]) -> None:
    if manifest.get("kind") == "PyTorchJob":
        validate_pytorchjob(manifest)
    else:
        validate_core(manifest)
