"""Thin adapters from the pure validators to pulumi-policy's policy objects.

The only logic here is translation: pulumi-policy hands over props wrapped in a proxy that raises
on values unknown during preview; `plain` turns those into UNKNOWN so each validator decides per
field (most skip the field, and `pulumi up` checks it again once it is known) instead of the
whole policy being skipped with a generic "can't run during preview" note.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

from . import (
    checkpoint,
    credentials,
    gpu,
    image,
    lifecycle,
    network,
    operator,
    pod_security,
    scheduler,
)
from .jobs import trainjob
from .model import UNKNOWN, Resource, Violation

PACK_NAME: Final = "pytorch-distributed-guardrails"

ResourceCheck = Callable[[str, Mapping[str, Any], Mapping[str, Any]], list[str]]
StackCheck = Callable[[list[Resource], Mapping[str, Any]], list[Violation]]


def plain(value: Any) -> Any:
    """Copy pulumi-policy's proxied props into dicts/lists, with UNKNOWN for preview unknowns."""
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key in value:
            try:
                result[key] = plain(value[key])
            except UnknownValueError:
                result[key] = UNKNOWN
        return result
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items: list[Any] = []
        for index in range(len(value)):
            try:
                items.append(plain(value[index]))
            except UnknownValueError:
                items.append(UNKNOWN)
        return items
    return value


def resource_policy(
    name: str,
    description: str,
    check: ResourceCheck,
    level: EnforcementLevel,
    config_schema: PolicyConfigSchema | None = None,
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        config = dict(args.get_config() or {})
        for message in check(args.resource_type, plain(args.props), config):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=level,
        config_schema=config_schema,
    )


def stack_policy(
    name: str,
    description: str,
    check: StackCheck,
    config_schema: PolicyConfigSchema | None = None,
    level: EnforcementLevel = EnforcementLevel.MANDATORY,
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [
            Resource(
                type=r.resource_type,
                name=r.name,
                props=plain(r.props),
                urn=r.urn,
                protect=bool(r.opts.protect),
            )
            for r in args.resources
        ]
        for violation in check(resources, dict(args.get_config() or {})):
            report_violation(violation.message, violation.urn)

    return StackValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=level,
        config_schema=config_schema,
    )


def _ignore_config(check: Callable[[str, Mapping[str, Any]], list[str]]) -> ResourceCheck:
    return lambda resource_type, props, _config: check(resource_type, props)


def build_policies() -> list[Policy]:
    mandatory, advisory = EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY
    return [
        stack_policy(
            "checkpoint-claim-protection",
            "The checkpoint claim of a multi-node PyTorchJob or TrainJob is ReadWriteMany, and "
            "every checkpoint claim is protected or retained on destroy.",
            checkpoint.checkpoint_claim_protection,
            PolicyConfigSchema(properties=dict(checkpoint.CONFIG_SCHEMA)),
        ),
        resource_policy(
            "image-pinned-by-digest",
            "PyTorchJob and TrainJob containers use images pinned by digest, never a bare tag or "
            "latest.",
            _ignore_config(image.image_pinned_by_digest),
            mandatory,
        ),
        resource_policy(
            "gpu-requests-match-nproc",
            "Training containers request as many GPUs as processes per node (spec.nprocPerNode, "
            "a TrainJob's spec.trainer.numProcPerNode), with GPU requests "
            "equal to limits, a memory limit and cpu and memory requests.",
            _ignore_config(gpu.gpu_requests_match_nproc),
            mandatory,
        ),
        resource_policy(
            "pytorchjob-operator-shape",
            "A PyTorchJob has only Master and Worker replicas, exactly one Master, a "
            "container named 'pytorch' in each, a DNS-1035 name and a string nprocPerNode.",
            _ignore_config(operator.pytorchjob_operator_shape),
            mandatory,
        ),
        resource_policy(
            "trainjob-shape",
            "A TrainJob names its runtime, sets its trainer (numNodes >= 1, none of the torch "
            "plugin's PET_* variables), patches the runtime's 'node' job and has a DNS-1035 name.",
            _ignore_config(trainjob.trainjob_shape),
            mandatory,
        ),
        stack_policy(
            "registry-secret-type",
            "Registry credentials and image pull secrets are Secrets of type "
            "kubernetes.io/dockerconfigjson with a well-formed .dockerconfigjson.",
            lambda resources, _config: credentials.registry_secret_type(resources),
        ),
        resource_policy(
            "no-plaintext-credentials",
            "No credential appears in plain text outside a Secret's data or a provider's "
            "secret field (env values, arguments, labels, config maps).",
            _ignore_config(credentials.no_plaintext_credentials),
            mandatory,
        ),
        resource_policy(
            "runai-scheduler",
            "On Run:ai stacks every PyTorchJob pod uses runai-scheduler; a TrainJob is refused "
            "there (Run:ai does not schedule TrainJob).",
            scheduler.runai_scheduler,
            mandatory,
            PolicyConfigSchema(
                properties={
                    "platform": {
                        "type": "string",
                        "enum": list(scheduler.PLATFORMS),
                        "description": "The stack's platform; when unset, a namespace "
                        "starting with 'runai-' marks a Run:ai stack.",
                    }
                }
            ),
        ),
        resource_policy(
            "job-names-a-queue",
            "On a shared cluster a job goes through a queue that admits all its pods or none: "
            "it carries Kueue's kueue.x-k8s.io/queue-name (stack setting job.queue), Run:ai's "
            "runai/queue or KAI's kai.scheduler/queue label.",
            _ignore_config(scheduler.job_names_a_queue),
            advisory,
        ),
        resource_policy(
            "pod-security-run-as-non-root",
            'Pod Security "restricted", running as non-root: every job pod sets '
            "securityContext.runAsNonRoot: true (a pod that says runAsUser: 0 is "
            "pod-security-run-as-root's).",
            _ignore_config(pod_security.run_as_non_root),
            mandatory,
        ),
        resource_policy(
            "pod-security-run-as-user",
            'Pod Security "restricted", running as a non-root user: every job pod sets a numeric '
            "securityContext.runAsUser and runAsGroup, and no container runAsUser: 0.",
            _ignore_config(pod_security.run_as_user),
            mandatory,
        ),
        resource_policy(
            "pod-security-seccomp-profile",
            'Pod Security "restricted", seccomp: every job pod sets '
            "securityContext.seccompProfile.type RuntimeDefault (or Localhost).",
            _ignore_config(pod_security.seccomp_profile),
            mandatory,
        ),
        resource_policy(
            "pod-security-no-privilege-escalation",
            'Pod Security "restricted", privilege escalation: every container of a job pod, init '
            "containers included, sets securityContext.allowPrivilegeEscalation: false.",
            _ignore_config(pod_security.no_privilege_escalation),
            mandatory,
        ),
        resource_policy(
            "pod-security-drop-capabilities",
            'Pod Security "restricted", capabilities: every container of a job pod drops ALL '
            "and adds none but NET_BIND_SERVICE.",
            _ignore_config(pod_security.drop_capabilities),
            mandatory,
        ),
        resource_policy(
            "pod-security-volume-types",
            'Pod Security "restricted", volume types: job pods mount only configMap, csi, '
            "downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected and secret "
            "volumes.",
            _ignore_config(pod_security.volume_types),
            mandatory,
        ),
        resource_policy(
            "no-service-account-token",
            "Job pods (a PyTorchJob's templates, a TrainJob's TrainingRuntime) set "
            "automountServiceAccountToken: false: training needs no API access.",
            _ignore_config(pod_security.no_service_account_token),
            mandatory,
        ),
        resource_policy(
            "pod-security-run-as-root",
            "Job pods should not run as root (securityContext.runAsUser: 0, stack setting "
            'job.runAsRoot: true): Pod Security "restricted" refuses them.',
            _ignore_config(pod_security.run_as_root),
            advisory,
        ),
        stack_policy(
            "job-network-isolated",
            "A job's pods are selected by a NetworkPolicy of the stack that admits connections "
            "only from chosen sources (stack setting network.policy, on by default): its "
            "rendezvous and collectives are open to no other pod.",
            network.job_network_isolated,
            level=advisory,
        ),
        resource_policy(
            "job-active-deadline",
            "A job should bound its run time (a PyTorchJob's spec.runPolicy."
            "activeDeadlineSeconds, a TrainJob's spec.activeDeadlineSeconds).",
            _ignore_config(lifecycle.job_active_deadline),
            advisory,
        ),
        resource_policy(
            "job-ttl-after-finished",
            "A PyTorchJob should be cleaned up with spec.runPolicy.ttlSecondsAfterFinished.",
            _ignore_config(lifecycle.job_ttl_after_finished),
            advisory,
        ),
    ]
