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


def elastic_job(*, workers: int = 3, minimum: int = 1, maximum: int = 3) -> dict:
    """An elastic job as the operator's examples write it: Workers only, c10d."""
    job = samples.pytorchjob(workers=workers)
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    job["spec"]["elasticPolicy"] = {
        "minReplicas": minimum,
        "maxReplicas": maximum,
        "rdzvBackend": "c10d",
        "maxRestarts": 3,
    }
    return job


def test_an_elastic_job_of_workers_only_passes() -> None:
    assert check(elastic_job()) == []
    job = elastic_job()
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 1}}
    assert check(job) == []


def test_an_elastic_job_without_workers_fires() -> None:
    job = elastic_job()
    job["spec"]["pytorchReplicaSpecs"] = {"Master": samples.replica(replicas=1)}
    job["spec"]["elasticPolicy"]["maxReplicas"] = 1
    assert check(job) == [
        "spec.pytorchReplicaSpecs.Worker is missing: the operator requires it with "
        "spec.elasticPolicy (the rendezvous runs on the job's worker-0)"
    ]


def test_the_deprecated_nproc_per_node_beside_the_spec_s_fires() -> None:
    job = elastic_job()
    job["spec"]["elasticPolicy"]["nProcPerNode"] = 1
    assert check(job) == [
        "spec.elasticPolicy.nProcPerNode must not be used with spec.nprocPerNode "
        "(it is deprecated: set spec.nprocPerNode alone)"
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"minReplicas": 3, "maxReplicas": 2},
            "spec.elasticPolicy.minReplicas 3 exceeds maxReplicas 2",
        ),
        ({"minReplicas": 0}, "spec.elasticPolicy.minReplicas is 0; at least 1 node trains"),
        ({"maxReplicas": 4}, "spec.elasticPolicy.maxReplicas 4 exceeds the job's 3 pods"),
        ({"rdzvBackend": "zookeeper"}, "spec.elasticPolicy.rdzvBackend is 'zookeeper' (allowed"),
    ],
)
def test_a_node_range_or_backend_that_cannot_work_fires(change: dict, expected: str) -> None:
    job = elastic_job()
    job["spec"]["elasticPolicy"].update(change)
    messages = check(job)
    assert len(messages) == 1 and messages[0].startswith(expected), messages


def test_a_gang_minimum_above_the_fewest_nodes_fires() -> None:
    job = elastic_job(minimum=2)
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 3}}
    assert check(job) == [
        "spec.runPolicy.schedulingPolicy.minAvailable 3 exceeds spec.elasticPolicy.minReplicas "
        "2: a gang scheduler would hold the job until 3 pods fit, though it trains on 2"
    ]


def test_an_elastic_policy_unknown_during_preview_does_not_fire() -> None:
    job = elastic_job()
    job["spec"]["elasticPolicy"] = UNKNOWN
    assert check(job) == []
    job = elastic_job()
    job["spec"]["elasticPolicy"]["minReplicas"] = UNKNOWN
    assert check(job) == []
