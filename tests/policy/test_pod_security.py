"""policy/rules/pod_security.py: Pod Security "restricted", requirement by requirement, on the pod
templates of a PyTorchJob and a TrainJob (and the token on a TrainingRuntime), each message
naming the field to set; root only where a pod says so, and then reported as such."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from pulumi.runtime.proto import analyzer_pb2

from policy.rules import pod_security
from policy.rules.jobs.trainjob import RUNTIME_TYPE
from policy.rules.model import PYTORCHJOB_TYPE, TRAINJOB_TYPE, UNKNOWN
from tests.policy import samples
from tests.policy.pack_client import Stub, configure, struct
from tests.policy.test_program_passes import policy_config

Rule = Callable[[str, Mapping[str, Any]], list[str]]
RULES: dict[str, Rule] = {
    "pod-security-run-as-non-root": pod_security.run_as_non_root,
    "pod-security-run-as-user": pod_security.run_as_user,
    "pod-security-seccomp-profile": pod_security.seccomp_profile,
    "pod-security-no-privilege-escalation": pod_security.no_privilege_escalation,
    "pod-security-drop-capabilities": pod_security.drop_capabilities,
    "pod-security-volume-types": pod_security.volume_types,
    "no-service-account-token": pod_security.no_service_account_token,
    "pod-security-run-as-root": pod_security.run_as_root,
}
MASTER = "spec.pytorchReplicaSpecs.Master.template.spec"
WORKER = "spec.pytorchReplicaSpecs.Worker.template.spec"
PATCH = (
    "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
    ".template.spec.template.spec"
)


def master(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [spec["template"]["spec"] for spec in job["spec"]["pytorchReplicaSpecs"].values()]


def patch(job: dict[str, Any]) -> dict[str, Any]:
    (entry,) = job["spec"]["runtimePatches"]
    (node,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return node["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("resource_type", "props"),
    [
        (PYTORCHJOB_TYPE, samples.pytorchjob()),
        (TRAINJOB_TYPE, samples.trainjob()),
        (RUNTIME_TYPE, samples.trainingruntime()),
    ],
    ids=["pytorchjob", "trainjob", "trainingruntime"],
)
def test_restricted_pods_without_a_token_pass_every_rule(
    resource_type: str, props: dict[str, Any]
) -> None:
    found = {name: rule(resource_type, props) for name, rule in RULES.items()}
    assert {name: messages for name, messages in found.items() if messages} == {}


def test_a_pod_without_a_security_context_is_told_each_field_to_set() -> None:
    job = samples.pytorchjob(workers=0)
    del master(job)["securityContext"]
    del master(job)["containers"][0]["securityContext"]
    container = f"{MASTER}.containers[0].securityContext"
    assert pod_security.run_as_non_root(PYTORCHJOB_TYPE, job) == [
        f"{MASTER}.securityContext.runAsNonRoot is not set; set it to true (Pod Security "
        '"restricted" admits only pods that cannot run as root)'
    ]
    assert [m.split(";")[0] for m in pod_security.run_as_user(PYTORCHJOB_TYPE, job)] == [
        f"{MASTER}.securityContext.runAsUser is not set",
        f"{MASTER}.securityContext.runAsGroup is not set",
    ]
    assert [m.split(";")[0] for m in pod_security.seccomp_profile(PYTORCHJOB_TYPE, job)] == [
        f"{MASTER}.securityContext.seccompProfile.type is not set"
    ]
    assert [
        m.split(";")[0] for m in pod_security.no_privilege_escalation(PYTORCHJOB_TYPE, job)
    ] == [f"{container}.allowPrivilegeEscalation is not set"]
    assert pod_security.drop_capabilities(PYTORCHJOB_TYPE, job) == [
        f'{container}.capabilities.drop is not set; set it to [ALL] (Pod Security "restricted")'
    ]
    assert pod_security.run_as_root(PYTORCHJOB_TYPE, job) == []


def test_the_pod_level_fields_may_be_every_containers_instead() -> None:
    job = samples.pytorchjob(workers=0)
    pod = master(job)
    for key in ("runAsNonRoot", "seccompProfile"):
        pod["containers"][0]["securityContext"][key] = pod["securityContext"].pop(key)
    assert pod_security.run_as_non_root(PYTORCHJOB_TYPE, job) == []
    assert pod_security.seccomp_profile(PYTORCHJOB_TYPE, job) == []
    pod["initContainers"] = [{"name": "fetch", "securityContext": samples.container_security()}]
    assert len(pod_security.run_as_non_root(PYTORCHJOB_TYPE, job)) == 1  # not on every one
    assert len(pod_security.seccomp_profile(PYTORCHJOB_TYPE, job)) == 1


def test_a_container_cannot_undo_what_the_pod_says() -> None:
    job = samples.pytorchjob(workers=0)
    own = master(job)["containers"][0]["securityContext"]
    own.update(runAsNonRoot=False, runAsUser=0, seccompProfile={"type": "Unconfined"})
    own["capabilities"]["add"] = ["NET_BIND_SERVICE", "SYS_ADMIN"]
    path = f"{MASTER}.containers[0].securityContext"
    assert pod_security.run_as_non_root(PYTORCHJOB_TYPE, job)[0].startswith(
        f"{path}.runAsNonRoot is false; remove it"
    )
    assert pod_security.run_as_user(PYTORCHJOB_TYPE, job)[0].startswith(
        f"{path}.runAsUser is 0 (root)"
    )
    assert pod_security.seccomp_profile(PYTORCHJOB_TYPE, job)[0].startswith(
        f'{path}.seccompProfile.type is "Unconfined"'
    )
    assert pod_security.drop_capabilities(PYTORCHJOB_TYPE, job) == [
        f'{path}.capabilities.add adds SYS_ADMIN; remove them (Pod Security "restricted" '
        "allows only NET_BIND_SERVICE)"
    ]


def test_init_containers_are_held_to_the_container_requirements() -> None:
    job = samples.pytorchjob()
    for pod in pods(job):
        pod["initContainers"] = [{"name": "wait", "image": samples.DIGEST_IMAGE}]
    escalation = pod_security.no_privilege_escalation(PYTORCHJOB_TYPE, job)
    assert [m.split(" is ")[0] for m in escalation] == [
        f"{MASTER}.initContainers[0].securityContext.allowPrivilegeEscalation",
        f"{WORKER}.initContainers[0].securityContext.allowPrivilegeEscalation",
    ]
    assert len(pod_security.drop_capabilities(PYTORCHJOB_TYPE, job)) == 2


def test_a_numeric_user_and_group_are_required() -> None:
    job = samples.pytorchjob(workers=0)
    master(job)["securityContext"]["runAsUser"] = "trainer"
    (message,) = pod_security.run_as_user(PYTORCHJOB_TYPE, job)
    assert message == (
        f'{MASTER}.securityContext.runAsUser is "trainer"; set a numeric non-root user (stack '
        "setting job.securityContext.runAsUser)"
    )


def test_root_said_outright_is_the_run_as_root_rules_alone() -> None:
    job = samples.pytorchjob()
    for pod in pods(job):
        pod["securityContext"].update(runAsNonRoot=False, runAsUser=0, runAsGroup=0)
    assert pod_security.run_as_non_root(PYTORCHJOB_TYPE, job) == []
    assert pod_security.run_as_user(PYTORCHJOB_TYPE, job) == []
    assert [m.split(":")[0] for m in pod_security.run_as_root(PYTORCHJOB_TYPE, job)] == [
        f"{MASTER}.securityContext.runAsUser is 0",
        f"{WORKER}.securityContext.runAsUser is 0",
    ]
    assert "job.runAsRoot: true" in pod_security.run_as_root(PYTORCHJOB_TYPE, job)[0]


def test_a_host_path_volume_is_refused_by_name_of_its_kind() -> None:
    job = samples.pytorchjob(workers=0)
    master(job)["volumes"].append({"name": "data", "hostPath": {"path": "/data"}})
    assert pod_security.volume_types(PYTORCHJOB_TYPE, job) == [
        f"{MASTER}.volumes[1] is a hostPath volume; use one of configMap, csi, downwardAPI, "
        'emptyDir, ephemeral, persistentVolumeClaim, projected, secret (Pod Security "restricted")'
    ]


def test_the_token_is_checked_on_pytorchjob_templates_and_trainingruntimes() -> None:
    job = samples.pytorchjob()
    for pod in pods(job):
        del pod["automountServiceAccountToken"]
    assert [
        m.split(";")[0] for m in pod_security.no_service_account_token(PYTORCHJOB_TYPE, job)
    ] == [
        f"{MASTER}.automountServiceAccountToken is not set",
        f"{WORKER}.automountServiceAccountToken is not set",
    ]
    runtime = samples.trainingruntime()
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]["automountServiceAccountToken"] = True
    (message,) = pod_security.no_service_account_token(RUNTIME_TYPE, runtime)
    assert message.startswith(
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec."
        "automountServiceAccountToken is true; set it to false"
    )
    # A TrainJob's patch cannot set it: its runtime's is the one that counts.
    assert pod_security.no_service_account_token(TRAINJOB_TYPE, samples.trainjob()) == []


def test_a_trainjobs_node_container_is_told_where_its_patch_sets_it() -> None:
    job = samples.trainjob()
    del patch(job)["containers"][0]["securityContext"]
    del patch(job)["securityContext"]["runAsNonRoot"]
    assert pod_security.no_privilege_escalation(TRAINJOB_TYPE, job)[0].startswith(
        f"{PATCH}.containers[0].securityContext.allowPrivilegeEscalation is not set"
    )
    assert pod_security.run_as_non_root(TRAINJOB_TYPE, job)[0].startswith(
        f"{PATCH}.securityContext.runAsNonRoot is not set"
    )
    del patch(job)["containers"]  # no entry for `node` yet: where it would go
    assert pod_security.drop_capabilities(TRAINJOB_TYPE, job)[0].startswith(
        f"{PATCH}.containers[0].securityContext.capabilities.drop is not set"
    )


def test_values_unknown_during_preview_are_left_for_up() -> None:
    job = samples.pytorchjob(workers=0)
    master(job)["securityContext"] = UNKNOWN
    master(job)["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": UNKNOWN,
        "capabilities": {"drop": UNKNOWN},
    }
    assert all(rule(PYTORCHJOB_TYPE, job) == [] for rule in RULES.values())


def root_job() -> dict[str, Any]:
    job = samples.pytorchjob(workers=0)
    master(job)["securityContext"].update(runAsNonRoot=False, runAsUser=0)
    return job


def levels(analyzer: Stub, config: Mapping[str, Any]) -> dict[str, int]:
    configure(analyzer, config)
    response = analyzer.Analyze(
        analyzer_pb2.AnalyzeRequest(
            type=PYTORCHJOB_TYPE, properties=struct(root_job()), urn="u", name="j"
        )
    )
    return {d.policyName: d.enforcementLevel for d in response.diagnostics}


def test_root_is_a_warning_by_default_and_stops_prod(analyzer: Stub) -> None:
    assert levels(analyzer, {}) == {"pod-security-run-as-root": analyzer_pb2.ADVISORY}
    prod = levels(analyzer, policy_config("prod"))
    assert prod["pod-security-run-as-root"] == analyzer_pb2.MANDATORY
