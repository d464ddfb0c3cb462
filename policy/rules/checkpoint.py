"""The checkpoint claim a job mounts must outlive the job's pods and the stack itself.

Multi-node: every replica writes or reads the same checkpoint directory from a different node, so
the claim must be ReadWriteMany; with ReadWriteOnce the second pod hangs in ContainerCreating
holding its GPU. Destroy: `pulumi destroy` (or a rename that replaces the claim) would delete the
only copy of weeks of training unless the claim is protected or retained.

A policy sees the `protect` option but not `retain_on_delete` (pulumi-policy exposes only
protect, ignore_changes, delete_before_replace, aliases, timeouts, secret outputs and parent), so
a retained claim states it with the RETAIN_ANNOTATION, set by the program from the same setting.
Every claim a job (PyTorchJob or TrainJob) mounts counts as checkpoint storage. A claim the stack
does not create (checkpoints.existingClaim) is never deleted by it and is not checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .jobs import JobView, job_view
from .model import (
    PVC_TYPE,
    RETAIN_ANNOTATION,
    Resource,
    Violation,
    as_list,
    claim_names,
    dig,
    find_named,
    flag,
    is_unknown,
    metadata_name,
    metadata_namespace,
)

ALLOW_UNRETAINED: Final = "allowUnretained"
ALLOW_SINGLE_NODE_ACCESS: Final = "allowSingleNodeAccess"
CONFIG_SCHEMA: Final = {
    ALLOW_UNRETAINED: {
        "type": "boolean",
        "default": False,
        "description": "Allow a checkpoint claim that is neither protected nor retained "
        "(scratch stacks only).",
    },
    ALLOW_SINGLE_NODE_ACCESS: {
        "type": "boolean",
        "default": False,
        "description": "Allow a multi-node job on a claim that is not ReadWriteMany "
        "(all pods pinned to one node, e.g. a single-node dev cluster).",
    },
}


def checkpoint_claim_protection(
    resources: Iterable[Resource], config: Mapping[str, Any]
) -> list[Violation]:
    resources = list(resources)
    claims = [r for r in resources if r.type == PVC_TYPE]
    violations: list[Violation] = []
    for job in resources:
        view = job_view(job.type)
        if view is None:
            continue
        pods = view.pod_count(job.props)
        namespace = metadata_namespace(job.props)
        mounted = claim_names(pod.spec for pod in view.pod_specs(job.props))
        for claim_name in sorted(mounted):
            claim = find_named(claims, claim_name, namespace)
            if claim is None:
                continue
            violations.extend(_access_violations(view, job, claim, pods, config))
            violations.extend(_retention_violations(view, job, claim, config))
    return violations


def _access_violations(
    view: JobView, job: Resource, claim: Resource, pods: Any, config: Mapping[str, Any]
) -> list[Violation]:
    if is_unknown(pods) or pods <= 1 or flag(config, ALLOW_SINGLE_NODE_ACCESS):
        return []
    modes = dig(claim.props, "spec", "accessModes")
    if is_unknown(modes) or "ReadWriteMany" in as_list(modes):
        return []
    return [
        Violation(
            f"claim {metadata_name(claim.props)!r} is mounted by the {pods} pods of {view.kind} "
            f"{metadata_name(job.props)!r} but spec.accessModes is {as_list(modes)}; "
            f"a multi-node job needs ReadWriteMany (or policy config "
            f"{ALLOW_SINGLE_NODE_ACCESS}: true for a single-node cluster)",
            claim.urn or None,
        )
    ]


def _retention_violations(
    view: JobView, job: Resource, claim: Resource, config: Mapping[str, Any]
) -> list[Violation]:
    if claim.protect or flag(config, ALLOW_UNRETAINED):
        return []
    marker = dig(claim.props, "metadata", "annotations", RETAIN_ANNOTATION)
    if is_unknown(marker) or marker == "true":
        return []
    return [
        Violation(
            f"checkpoint claim {metadata_name(claim.props)!r} of {view.kind} "
            f"{metadata_name(job.props)!r} is neither protected nor retained on destroy: "
            f"set checkpoints.retainOnDestroy (which adds metadata.annotations"
            f"[{RETAIN_ANNOTATION!r}] = 'true') or protect=True, or opt out with policy config "
            f"{ALLOW_UNRETAINED}: true",
            claim.urn or None,
        )
    ]
