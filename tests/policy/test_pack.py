"""The pack as Pulumi runs it: policy/__main__.py started as a process, spoken to over gRPC.

The Pulumi CLI is not available here, so these tests play the engine's part with the same
analyzer protocol messages: ask for the pack's info, send the per-stack policy config, then
resources with values unknown during preview and with secret-wrapped values.
"""

from __future__ import annotations

import json

from google.protobuf import empty_pb2
from pulumi.runtime.proto import analyzer_pb2, plugin_pb2
from pulumi_policy import EnforcementLevel, StackValidationPolicy
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from policy.rules.model import PVC_TYPE, PYTORCHJOB_TYPE, SECRET_TYPE, UNKNOWN
from policy.rules.pack import PACK_NAME, build_policies, plain
from tests.conftest import REPO_ROOT
from tests.policy import samples
from tests.policy.pack_client import Stub, analyze, configure, struct

MANDATORY_POLICIES = {
    "checkpoint-claim-protection",
    "image-pinned-by-digest",
    "gpu-requests-match-nproc",
    "pytorchjob-operator-shape",
    "registry-secret-type",
    "no-plaintext-credentials",
    "runai-scheduler",
    "trainjob-shape",
    "pod-security-run-as-non-root",
    "pod-security-run-as-user",
    "pod-security-seccomp-profile",
    "pod-security-no-privilege-escalation",
    "pod-security-drop-capabilities",
    "pod-security-volume-types",
    "no-service-account-token",
}
ADVISORY_POLICIES = {
    "job-active-deadline",
    "job-names-a-queue",
    "job-network-isolated",
    "job-ttl-after-finished",
    "pod-security-run-as-root",
}


def test_build_policies_declares_every_rule_with_its_level() -> None:
    policies = build_policies()
    levels = {p.name: p.enforcement_level for p in policies}
    assert len(levels) == len(policies)  # names are unique
    assert levels == {
        **dict.fromkeys(MANDATORY_POLICIES, EnforcementLevel.MANDATORY),
        **dict.fromkeys(ADVISORY_POLICIES, EnforcementLevel.ADVISORY),
    }
    stack_policies = {p.name for p in policies if isinstance(p, StackValidationPolicy)}
    assert stack_policies == {
        "checkpoint-claim-protection",
        "job-network-isolated",
        "registry-secret-type",
    }


def test_every_key_in_the_stack_policy_configs_is_in_a_schema() -> None:
    schemas = {p.name: p.config_schema for p in build_policies()}
    for path in sorted((REPO_ROOT / "policy" / "config").glob("*.json")):
        for policy_name, values in json.loads(path.read_text()).items():
            settings = set(values) - {"enforcementLevel"}  # the engine's, any policy's
            schema = schemas[policy_name]
            if not settings:
                continue
            assert schema is not None, f"{path.name}: {policy_name} takes no config"
            unknown = settings - set(schema.properties)
            assert not unknown, f"{path.name}: {policy_name} has no settings {unknown}"


def test_plain_turns_preview_unknowns_into_unknown_per_field() -> None:
    proxied = unknown_checking_proxy(
        {"spec": {"image": UNKNOWN_STRING_VALUE, "args": ["a", UNKNOWN_STRING_VALUE]}, "n": 1}
    )
    assert plain(proxied) == {"spec": {"image": UNKNOWN, "args": ["a", UNKNOWN]}, "n": 1}


# The pack over gRPC (fixture `analyzer` in conftest.py)


def test_pack_serves_its_info_and_plugin_version(analyzer: Stub) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == PACK_NAME
    assert info.supportsConfig
    levels = {p.name: p.enforcementLevel for p in info.policies}
    assert {n for n, lvl in levels.items() if lvl == analyzer_pb2.MANDATORY} == MANDATORY_POLICIES
    assert {n for n, lvl in levels.items() if lvl == analyzer_pb2.ADVISORY} == ADVISORY_POLICIES
    schema = next(p for p in info.policies if p.name == "checkpoint-claim-protection")
    assert set(schema.configSchema.properties) == {"allowUnretained", "allowSingleNodeAccess"}
    assert analyzer.GetPluginInfo(empty_pb2.Empty()).version
    assert isinstance(analyzer.GetPluginInfo(empty_pb2.Empty()), plugin_pb2.PluginInfo)


def test_tagged_image_is_reported_as_mandatory(analyzer: Stub) -> None:
    configure(analyzer, {})
    job = samples.pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = (
        "trainer:v1"
    )
    response = analyzer.Analyze(
        analyzer_pb2.AnalyzeRequest(type=PYTORCHJOB_TYPE, properties=struct(job), urn="u", name="j")
    )
    [diagnostic] = [d for d in response.diagnostics if d.enforcementLevel == analyzer_pb2.MANDATORY]
    assert diagnostic.policyName == "image-pinned-by-digest"
    assert "containers[0].image 'trainer:v1' is a bare tag" in diagnostic.message


def test_image_unknown_during_preview_is_not_a_violation(
    analyzer: Stub,
) -> None:
    configure(analyzer, {})
    job = samples.pytorchjob()
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["image"] = UNKNOWN_STRING_VALUE
    # no diagnostic at all: not even pulumi-policy's "can't run policy during preview" note
    assert analyze(analyzer, PYTORCHJOB_TYPE, job) == {}


def test_runai_platform_comes_from_the_policy_config(
    analyzer: Stub,
) -> None:
    job = samples.pytorchjob()
    job["metadata"]["namespace"] = "training"
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        del spec["template"]["spec"]["schedulerName"]
    configure(analyzer, {})
    assert "runai-scheduler" not in analyze(analyzer, PYTORCHJOB_TYPE, job)
    configure(analyzer, {"runai-scheduler": {"platform": "runai"}})
    assert "schedulerName is not set" in analyze(analyzer, PYTORCHJOB_TYPE, job)["runai-scheduler"]


def test_secret_values_reach_the_pack_in_plain_text(
    analyzer: Stub,
) -> None:
    """Why no-plaintext-credentials judges location: a secret-wrapped value arrives unwrapped."""
    configure(analyzer, {})
    secret_value = {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": "hunter2"}
    props = {"metadata": {"name": "cfg"}, "data": {"password": secret_value}}
    messages = analyze(analyzer, "kubernetes:core/v1:ConfigMap", props)
    assert messages["no-plaintext-credentials"].endswith(
        "data.password holds a literal credential; keep it in a Secret"
    )
    secret = samples.registry_secret()
    secret["data"] = {
        ".dockerconfigjson": {**secret_value, "value": secret["data"][".dockerconfigjson"]}
    }
    assert analyze(analyzer, SECRET_TYPE, secret) == {}


def test_stack_policies_see_protect_and_the_stack_config(
    analyzer: Stub,
) -> None:
    def stack_request(protect: bool) -> analyzer_pb2.AnalyzeStackRequest:
        return analyzer_pb2.AnalyzeStackRequest(
            resources=[
                analyzer_pb2.AnalyzerResource(
                    type=PYTORCHJOB_TYPE, properties=struct(samples.pytorchjob()), urn="urn:job"
                ),
                analyzer_pb2.AnalyzerResource(
                    type=PVC_TYPE,
                    properties=struct(samples.claim(access_mode="ReadWriteOnce", retained=False)),
                    urn="urn:claim",
                    options=analyzer_pb2.AnalyzerResourceOptions(protect=protect),
                ),
            ]
        )

    def claim_diagnostics(protect: bool) -> list[analyzer_pb2.AnalyzeDiagnostic]:
        # The sample job has no NetworkPolicy: job-network-isolated's warning is not this test's.
        found = analyzer.AnalyzeStack(stack_request(protect)).diagnostics
        return [d for d in found if d.policyName != "job-network-isolated"]

    configure(analyzer, {})
    diagnostics = claim_diagnostics(protect=False)
    assert [(d.policyName, d.urn) for d in diagnostics] == [
        ("checkpoint-claim-protection", "urn:claim"),
        ("checkpoint-claim-protection", "urn:claim"),
    ]
    [unprotected] = claim_diagnostics(protect=True)
    assert "ReadWriteMany" in unprotected.message
    dev = json.loads((REPO_ROOT / "policy" / "config" / "dev.json").read_text())
    configure(analyzer, dev)
    assert claim_diagnostics(protect=False) == []
