"""pytorchjob-operator-shape: the training operator's rules for name, replicas and containers."""

from __future__ import annotations

import pytest

from policy.rules.model import PVC_TYPE, PYTORCHJOB_TYPE, UNKNOWN
from policy.rules.operator import pytorchjob_operator_shape
from tests.policy import samples


def check(job: dict) -> list[str]:
    return pytorchjob_operator_shape(PYTORCHJOB_TYPE, job)


def test_compliant_multi_and_single_node_jobs_pass() -> None:
    assert check(samples.pytorchjob(workers=3)) == []
    assert check(samples.pytorchjob(workers=0)) == []


def test_other_resource_types_are_ignored() -> None:
    assert pytorchjob_operator_shape(PVC_TYPE, {"spec": {}}) == []


def test_missing_master_replicas_means_the_operator_default_of_one() -> None:
    job = samples.pytorchjob()
    del job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"]
    assert check(job) == []


def test_two_masters_fire() -> None:
    job = samples.pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    assert check(job) == [
        "spec.pytorchReplicaSpecs.Master.replicas is 2; the operator requires exactly 1"
    ]


def test_job_without_master_fires() -> None:
    job = samples.pytorchjob()
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    assert any("spec.pytorchReplicaSpecs.Master is missing" in m for m in check(job))


def test_unknown_replica_type_fires() -> None:
    job = samples.pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Launcher"] = samples.replica(replicas=1)
    messages = check(job)
    assert len(messages) == 1
    assert "spec.pytorchReplicaSpecs.Launcher is not a PyTorchJob replica type" in messages[0]


def test_zero_workers_fire() -> None:
    job = samples.pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0
    assert any("Worker.replicas is 0" in m for m in check(job))


def test_container_not_named_pytorch_fires_per_replica() -> None:
    job = samples.pytorchjob()
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["name"] = "trainer"
    messages = check(job)
    assert len(messages) == 2
    assert messages[0].startswith(
        "spec.pytorchReplicaSpecs.Master.template.spec.containers has no container named 'pytorch'"
    )
    assert "Worker" in messages[1]


def test_invalid_restart_policy_fires() -> None:
    job = samples.pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    assert check(job) == [
        "spec.pytorchReplicaSpecs.Worker.restartPolicy is 'Sometimes' "
        "(allowed: Always, OnFailure, Never, ExitCode)"
    ]


def test_missing_replica_specs_fire() -> None:
    job = samples.pytorchjob()
    del job["spec"]["pytorchReplicaSpecs"]
    assert check(job) == ["spec.pytorchReplicaSpecs is missing: the job starts no pods"]


@pytest.mark.parametrize("name", ["DDP", "1-ddp", "ddp-", "ddp.job", "d" * 64, ""])
def test_a_name_that_is_not_a_dns_1035_label_fires(name: str) -> None:
    job = samples.pytorchjob()
    job["metadata"]["name"] = name
    assert check(job) == [
        f"metadata.name {name!r} is not a DNS-1035 label (lowercase letters, digits and '-', "
        "starting with a letter, at most 63 characters)"
    ]


def test_a_63_character_name_passes() -> None:
    job = samples.pytorchjob()
    job["metadata"]["name"] = "d" * 63
    assert check(job) == []


def test_a_numeric_nproc_per_node_fires() -> None:
    job = samples.pytorchjob()
    job["spec"]["nprocPerNode"] = 1
    assert check(job) == [
        "spec.nprocPerNode is 1, not a string; the PyTorchJob schema takes a string such as "
        "'8' or 'auto'"
    ]


def test_an_unknown_name_or_nproc_per_node_does_not_fire() -> None:
    job = samples.pytorchjob()
    job["metadata"]["name"] = UNKNOWN
    job["spec"]["nprocPerNode"] = UNKNOWN
    assert check(job) == []


def test_values_unknown_during_preview_do_not_fire() -> None:
    job = samples.pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = UNKNOWN
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = UNKNOWN
    assert check(job) == []
