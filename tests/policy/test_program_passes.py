"""The real program's resources, for both stacks, go through the running policy pack exactly as
the engine sends them (inputs with secret envelopes and preview unknowns, the protect option,
the stack's --policy-pack-config) and raise no mandatory violation. Variations of the same
program show the pack does catch the dangerous changes it exists for."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY

from policy.rules.model import (
    DOCKER_IMAGE_TYPE,
    PVC_TYPE,
    PYTORCHJOB_TYPE,
    RETAIN_ANNOTATION,
    SECRET_TYPE,
)
from tests.components.s3_stack import S3_CHECKPOINTS, S3_CREDENTIALS
from tests.policy.pack_client import REPO_ROOT, Stub, configure, struct
from tests.policy.test_pack import ADVISORY_POLICIES
from tests.pulumi_harness import ProgramResult, RegisteredResource, Secret, run_program

SECRETS: dict[str, dict[str, str] | None] = {
    "dev": None,
    "prod": {"registryPassword": "not-a-real-password"},
    "digits": None,
}
# What `pulumi config set --secret --path` puts in an object (the example's job.secretEnv).
SECRET_PATHS: dict[str, dict[str, str]] = {
    "digits": {"job.secretEnv.HF_TOKEN": "hf_policy-not-real"},
}
EXPECTED_TYPES = {
    "dev": {PYTORCHJOB_TYPE, PVC_TYPE, DOCKER_IMAGE_TYPE},
    "prod": {PYTORCHJOB_TYPE, PVC_TYPE, DOCKER_IMAGE_TYPE, SECRET_TYPE},
    "digits": {PYTORCHJOB_TYPE, PVC_TYPE, DOCKER_IMAGE_TYPE, SECRET_TYPE},
}


def policy_config(stack: str) -> dict[str, Any]:
    return json.loads((REPO_ROOT / "policy" / "config" / f"{stack}.json").read_text())


def run(stack: str, *, preview: bool = False, overrides: Mapping[str, Any] | None = None):
    result = run_program(
        stack,
        overrides=overrides,
        secrets=SECRETS[stack],
        preview=preview,
        secret_paths=SECRET_PATHS.get(stack),
    )
    assert result.error is None, f"program failed for {stack}: {result.error}"
    return result


def wire(value: Any) -> Any:
    """Back to the engine's wire form: secrets in their envelope (the pack must unwrap them)."""
    if isinstance(value, Secret):
        return {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": wire(value.value)}
    if isinstance(value, dict):
        return {key: wire(item) for key, item in value.items()}
    if isinstance(value, list):
        return [wire(item) for item in value]
    return value


def options(resource: RegisteredResource) -> analyzer_pb2.AnalyzerResourceOptions:
    return analyzer_pb2.AnalyzerResourceOptions(protect=resource.protect)


def diagnostics(
    stub: Stub, result: ProgramResult, config: Mapping[str, Any]
) -> list[analyzer_pb2.AnalyzeDiagnostic]:
    configure(stub, config)
    found: list[analyzer_pb2.AnalyzeDiagnostic] = []
    for resource in result.resources:
        response = stub.Analyze(
            analyzer_pb2.AnalyzeRequest(
                type=resource.type,
                properties=struct(wire(resource.inputs)),
                urn=resource.urn,
                name=resource.name,
                options=options(resource),
            )
        )
        found.extend(response.diagnostics)
    stack = analyzer_pb2.AnalyzeStackRequest(
        resources=[
            analyzer_pb2.AnalyzerResource(
                type=r.type,
                properties=struct(wire(r.inputs)),
                urn=r.urn,
                name=r.name,
                options=options(r),
            )
            for r in result.resources
        ]
    )
    found.extend(stub.AnalyzeStack(stack).diagnostics)
    return found


def mandatory(found: list[analyzer_pb2.AnalyzeDiagnostic]) -> list[tuple[str, str]]:
    return [
        (d.policyName, d.message) for d in found if d.enforcementLevel == analyzer_pb2.MANDATORY
    ]


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
@pytest.mark.parametrize("stack", ["dev", "prod", "digits"])
def test_program_output_passes_every_mandatory_policy(
    analyzer: Stub, stack: str, preview: bool
) -> None:
    result = run(stack, preview=preview)
    assert EXPECTED_TYPES[stack] <= {r.type for r in result.resources}
    found = diagnostics(analyzer, result, policy_config(stack))
    assert mandatory(found) == []
    # Warnings only from the advisory rules; no "can't run policy during preview" notes either.
    assert {d.policyName for d in found} <= ADVISORY_POLICIES


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_retain_annotation_tells_the_truth_about_retain_on_delete(stack: str) -> None:
    """The policy trusts the annotation because it cannot see retain_on_delete; check both agree."""
    for retain in (True, False):
        result = run(stack, overrides={"checkpoints": {"retainOnDestroy": retain}})
        claim = result.one(PVC_TYPE)
        annotations = claim.inputs["metadata"].get("annotations", {})
        assert claim.retain_on_delete is retain
        assert (annotations.get(RETAIN_ANNOTATION) == "true") is retain


def test_unretained_prod_claim_is_stopped(analyzer: Stub) -> None:
    result = run("prod", overrides={"checkpoints": {"retainOnDestroy": False}})
    found = mandatory(diagnostics(analyzer, result, policy_config("prod")))
    assert [name for name, _ in found] == ["checkpoint-claim-protection"]
    assert "neither protected nor retained" in found[0][1]


def test_dev_without_its_opt_outs_is_stopped(analyzer: Stub) -> None:
    found = mandatory(diagnostics(analyzer, run("dev"), {}))
    assert [name for name, _ in found] == ["checkpoint-claim-protection"] * 2
    assert "needs ReadWriteMany" in found[0][1]


def test_tagged_prebuilt_image_is_stopped(analyzer: Stub) -> None:
    image = {"build": False, "ref": "registry.example.com/ml/pytorch-ddp-example:v3"}
    result = run("prod", overrides={"image": image})
    found = mandatory(diagnostics(analyzer, result, policy_config("prod")))
    assert {name for name, _ in found} == {"image-pinned-by-digest"}
    assert all(
        "'registry.example.com/ml/pytorch-ddp-example:v3' is a bare tag" in m for _, m in found
    )


def test_more_gpus_per_node_still_pass(analyzer: Stub) -> None:
    result = run("prod", overrides={"job": {"gpusPerNode": 8, "nodes": 4}})
    assert mandatory(diagnostics(analyzer, result, policy_config("prod"))) == []


def test_prod_pods_off_the_runai_scheduler_are_stopped(analyzer: Stub) -> None:
    # The program leaves schedulerName unset off Run:ai; prod's policy config insists on Run:ai,
    # and on a queue, which the job off Run:ai (without job.queue) does not name.
    result = run("prod", overrides={"platform": "kubeflow", "runaiProject": None})
    found = mandatory(diagnostics(analyzer, result, policy_config("prod")))
    assert sorted(name for name, _ in found) == ["job-names-a-queue"] + ["runai-scheduler"] * 2


def test_a_stack_that_runs_as_root_is_warned_of_and_stopped_in_prod(analyzer: Stub) -> None:
    """job.runAsRoot is the only way to root; the non-root rules leave it to the root rule."""
    for stack, level in (("dev", analyzer_pb2.ADVISORY), ("prod", analyzer_pb2.MANDATORY)):
        result = run(stack, overrides={"job": {"runAsRoot": True}})
        found = diagnostics(analyzer, result, policy_config(stack))
        root = [d for d in found if d.policyName == "pod-security-run-as-root"]
        assert [d.enforcementLevel for d in root] == [level, level]  # Master and Worker
        assert "job.runAsRoot: true" in root[0].message
        assert {name for name, _ in mandatory(found)} <= {"pod-security-run-as-root"}


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_a_job_without_its_network_policy_is_warned_of_and_stopped_in_prod(
    analyzer: Stub, api: str
) -> None:
    """network.policy: false leaves the job's rendezvous open to every pod of the cluster."""
    overrides: dict[str, Any] = {"network": {"policy": False}}
    if api == "trainjob":
        overrides |= {"platform": "kubeflow", "runaiProject": None, "job": {"api": "trainjob"}}
    for stack, level in (("dev", analyzer_pb2.ADVISORY), ("prod", analyzer_pb2.MANDATORY)):
        found = diagnostics(analyzer, run(stack, overrides=overrides), policy_config(stack))
        network = [d for d in found if d.policyName == "job-network-isolated"]
        replicas = 1 if api == "trainjob" else 2  # a TrainJob's node pods; Master and Worker
        assert [d.enforcementLevel for d in network] == [level] * replicas, network
        assert "set network.policy: true" in network[0].message
        kept = diagnostics(analyzer, run(stack, overrides={**overrides, "network": {}}), {})
        assert "job-network-isolated" not in {d.policyName for d in kept}


def test_a_credential_in_plain_job_env_is_stopped(analyzer: Stub) -> None:
    """job.env is plain text everywhere; a credential's name there is refused, whatever its
    value, and job.secretEnv is the way (the example's HF_TOKEN passes above)."""
    result = run("digits", overrides={"job": {"env": {"WANDB_API_KEY": "0123abcd"}}})
    found = mandatory(diagnostics(analyzer, result, policy_config("digits")))
    assert [name for name, _ in found] == ["no-plaintext-credentials"] * 2  # Master and Worker
    assert "(WANDB_API_KEY) has a plain value" in found[0][1]
    assert "job.secretEnv.WANDB_API_KEY" in found[0][1]
    harmless = run("digits", overrides={"job": {"env": {"TOKENIZERS_PARALLELISM": "false"}}})
    assert mandatory(diagnostics(analyzer, harmless, policy_config("digits"))) == []


def test_gpus_of_another_resource_are_compared_with_the_processes(analyzer: Stub) -> None:
    result = run("prod", overrides={"job": {"gpusPerNode": 2, "gpuResource": "amd.com/gpu"}})
    assert mandatory(diagnostics(analyzer, result, policy_config("prod"))) == []
    job = result.one(PYTORCHJOB_TYPE)
    master = job.inputs["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert master["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "2"


@pytest.mark.parametrize(
    ("stack", "config"),
    [("dev", {}), ("prod", policy_config("prod"))],
    ids=["dev-without-its-opt-outs", "prod"],
)
def test_an_s3_stack_passes_without_a_claim_to_protect(
    analyzer: Stub, stack: str, config: dict[str, Any]
) -> None:
    """Checkpoints in object storage: no claim for the claim rules to judge, and the credentials
    reach the pods by reference only."""
    result = run_program(
        stack,
        overrides={"checkpoints": S3_CHECKPOINTS},
        secrets=SECRETS[stack],
        secret_paths=S3_CREDENTIALS,
    )
    assert result.error is None, result.error
    assert PVC_TYPE not in {r.type for r in result.resources}
    assert mandatory(diagnostics(analyzer, result, config)) == []


@pytest.mark.parametrize(
    ("stack", "api"), [("dev", "pytorchjob"), ("prod", "pytorchjob"), ("dev", "trainjob")]
)
def test_a_stack_with_metrics_and_its_pod_monitor_passes(
    analyzer: Stub, stack: str, api: str
) -> None:
    """metrics.enabled adds a port (a TrainJob's on its TrainingRuntime) and a NetworkPolicy
    rule from named namespaces (not an open one: job-network-isolated stays quiet),
    metrics.podMonitor a custom resource no rule refuses."""
    overrides: dict[str, Any] = {"metrics": {"enabled": True, "podMonitor": True}}
    if api == "trainjob":
        overrides["job"] = {"api": "trainjob"}
    result = run(stack, overrides=overrides)
    assert "kubernetes:monitoring.coreos.com/v1:PodMonitor" in {r.type for r in result.resources}
    found = diagnostics(analyzer, result, policy_config(stack))
    assert mandatory(found) == []
    assert "job-network-isolated" not in {d.policyName for d in found}
    assert {d.policyName for d in found} <= ADVISORY_POLICIES
