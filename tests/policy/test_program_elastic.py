"""The real program with an elastic job (`job.elastic`), for both stacks, through the running
policy pack: no mandatory violation, and what it registers is the elastic PyTorchJob (Workers
only, the c10d elasticPolicy, on Run:ai the gang's minimum)."""

from __future__ import annotations

import pytest

from policy.rules.model import PYTORCHJOB_TYPE
from tests.policy.pack_client import Stub
from tests.policy.test_program_passes import diagnostics, mandatory, policy_config, run


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_an_elastic_job_passes_every_mandatory_policy(analyzer: Stub, stack: str) -> None:
    result = run(stack, overrides={"job": {"nodes": 3, "elastic": {"minNodes": 2}}})
    spec = result.one(PYTORCHJOB_TYPE).inputs["spec"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    assert spec["elasticPolicy"]["minReplicas"] == 2 and spec["elasticPolicy"]["maxReplicas"] == 3
    gang = spec["runPolicy"].get("schedulingPolicy")
    assert gang == ({"minAvailable": 2} if stack == "prod" else None)  # prod runs on Run:ai
    assert mandatory(diagnostics(analyzer, result, policy_config(stack))) == []


def test_a_gang_minimum_above_the_fewest_nodes_is_stopped(analyzer: Stub) -> None:
    result = run("prod", overrides={"job": {"nodes": 3, "elastic": {"minNodes": 2}}})
    job = result.one(PYTORCHJOB_TYPE)
    job.inputs["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 3  # a hand edit
    found = mandatory(diagnostics(analyzer, result, policy_config("prod")))
    assert [name for name, _ in found] == ["pytorchjob-operator-shape"]
    assert "minAvailable 3 exceeds spec.elasticPolicy.minReplicas 2" in found[0][1]
