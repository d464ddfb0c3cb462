"""Schema checks for the manifests the stack applies, shared by the builder and program tests.

Core kinds are validated against the real Kubernetes OpenAPI schemas (kubernetes-validate, strict:
unknown fields fail). A PyTorchJob is a custom resource, so its pod templates are validated as a
core PodTemplate and the rest against the training operator's admission rules as the policy pack
states them (`policy.rules.operator.admission_violations`): one statement of those rules, so a
rule the pack learns is one the builders' output is held to as well. Pod Security "restricted"
and the token likewise (`restricted_violations`, the pack's `policy.rules.pod_security`).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from policy.rules import pod_security
from policy.rules.operator import admission_violations

KUBERNETES_VERSION = "1.34.0"


def validate_core(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def validate_pytorchjob(manifest: dict[str, Any]) -> None:
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "PyTorchJob"
    problems = admission_violations(manifest)
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


def restricted_violations(manifest: dict[str, Any]) -> list[str]:
    """Why the pods of a job (or the TrainingRuntime under a TrainJob's pods) would not meet Pod
    Security "restricted" or would hold a service account token, by the pack's rules (all but
    `run_as_root`, which reports what a stack says on purpose)."""
    resource_type = f"kubernetes:{manifest['apiVersion']}:{manifest['kind']}"
    rules = (
        pod_security.run_as_non_root,
        pod_security.run_as_user,
        pod_security.seccomp_profile,
        pod_security.no_privilege_escalation,
        pod_security.drop_capabilities,
        pod_security.volume_types,
        pod_security.no_service_account_token,
    )
    return [message for rule in rules for message in rule(resource_type, manifest)]
