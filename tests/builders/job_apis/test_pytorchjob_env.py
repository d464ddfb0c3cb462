"""builders.job_apis.pytorchjob's environment rules against tables written from
training-operator v1.9's rules (envvar.go, master.go, elastic.go and the API defaulter
pytorch_defaults.go), not from the function itself.

The rules, as the tables below encode them: PYTHONUNBUFFERED is "1" in every pod; a job with a
Master gets MASTER_*/PET_MASTER_* (the master's service and its pytorchjob-port), WORLD_SIZE =
pods x integer nprocPerNode (else 1 per pod), RANK = PET_NODE_RANK = index (+1 for workers);
PET_NPROC_PER_NODE is spec.nprocPerNode (defaulted to "auto") whenever it is set, Master or not;
PET_NNODES is the pod count, or "min:max" with an elasticPolicy, which also brings
PET_RDZV_ENDPOINT (`<job>-worker-0`:worker port unless rdzvHost/rdzvPort), PET_RDZV_BACKEND
("c10d" unless rdzvBackend) and, when set, PET_MAX_RESTARTS, PET_RDZV_ID, PET_RDZV_CONF, and
PET_STANDALONE."""

from __future__ import annotations

from typing import Any

import pytest

from builders.job_apis import JobApiError as OperatorEnvError
from builders.job_apis.pytorchjob import (
    injected_env,
    pod_name,
    pytorchjob_manifest,
    replica_pods,
)
from settings.stack import load_stack_file
from tests.conftest import REPO_ROOT


def job(
    name: str = "big",
    *,
    workers: int | None = 3,
    master: bool = True,
    nproc: str | None = "8",
    port: int | None = 29400,
    elastic: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ports = [{"name": "pytorchjob-port", "containerPort": port}] if port is not None else []
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x", "ports": ports}]}}
    specs: dict[str, Any] = {}
    if master:
        specs["Master"] = {"replicas": 1, "template": template}
    if workers is not None:
        specs["Worker"] = {"replicas": workers, "template": template}
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if nproc is not None:
        spec["nprocPerNode"] = nproc
    if elastic is not None:
        spec["elasticPolicy"] = elastic
    return {"metadata": {"name": name}, "spec": spec}


def test_dev_stack_pods_get_what_the_operator_injects() -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    manifest = pytorchjob_manifest(settings, image="local")
    common = {
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "ddp-dev-master-0",
        "PET_MASTER_ADDR": "ddp-dev-master-0",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "WORLD_SIZE": "2",  # 2 pods x nprocPerNode "1"
        "PET_NPROC_PER_NODE": "1",
        "PET_NNODES": "2",
    }

    assert injected_env(manifest, "Master", 0) == {**common, "RANK": "0", "PET_NODE_RANK": "0"}
    assert injected_env(manifest, "Worker", 0) == {**common, "RANK": "1", "PET_NODE_RANK": "1"}


def test_worker_ranks_follow_the_master_and_world_size_counts_processes() -> None:
    spec = job()  # 1 master + 3 workers, nprocPerNode "8", port 29400

    env = injected_env(spec, "Worker", 2)

    assert env == {
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "big-master-0",
        "PET_MASTER_ADDR": "big-master-0",
        "MASTER_PORT": "29400",
        "PET_MASTER_PORT": "29400",
        "WORLD_SIZE": "32",
        "RANK": "3",
        "PET_NODE_RANK": "3",
        "PET_NPROC_PER_NODE": "8",
        "PET_NNODES": "4",
    }


@pytest.mark.parametrize("nproc", ["auto", None])
def test_non_integer_nproc_per_node_counts_one_process_per_pod(nproc: str | None) -> None:
    env = injected_env(job(nproc=nproc), "Master", 0)

    assert env["WORLD_SIZE"] == "4"  # 4 pods, one process each as far as the operator knows
    assert env["PET_NPROC_PER_NODE"] == "auto"  # the API default, passed through for torchrun


def test_missing_port_falls_back_to_the_defaulted_23456() -> None:
    assert injected_env(job(port=None), "Worker", 0)["MASTER_PORT"] == "23456"


def test_elastic_jobs_get_the_rendezvous_and_a_node_range() -> None:
    spec = job(elastic={"minReplicas": 1, "maxReplicas": 4})  # 1 master + 3 workers, port 29400

    env = injected_env(spec, "Worker", 0)

    assert {key: value for key, value in env.items() if key.startswith("PET_")} == {
        "PET_MASTER_ADDR": "big-master-0",
        "PET_MASTER_PORT": "29400",
        "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "8",
        "PET_RDZV_ENDPOINT": "big-worker-0:29400",  # the first worker's service, worker port
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": "1:4",
    }


def test_elastic_policy_fields_each_become_their_variable() -> None:
    policy = {
        "maxReplicas": 5,  # the defaulter copies it to minReplicas
        "rdzvHost": "rdzv.example",
        "rdzvPort": 1234,
        "rdzvBackend": "etcd",
        "rdzvId": "run-7",
        "rdzvConf": [{"key": "timeout", "value": "60"}, {"key": "read_timeout", "value": "9"}],
        "maxRestarts": 3,
        "standalone": True,
    }

    env = injected_env(job(master=False, nproc=None, elastic=policy), "Worker", 2)

    assert env == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_RDZV_ENDPOINT": "rdzv.example:1234",
        "PET_RDZV_BACKEND": "etcd",
        "PET_NNODES": "5:5",
        "PET_MAX_RESTARTS": "3",
        "PET_RDZV_ID": "run-7",
        "PET_RDZV_CONF": "timeout=60,read_timeout=9",
        "PET_STANDALONE": "",
    }


def test_an_empty_elastic_policy_ranges_over_the_worker_count() -> None:
    env = injected_env(job(master=False, workers=3, elastic={}), "Worker", 0)
    assert env["PET_NNODES"] == "3:3"


def test_the_deprecated_elastic_nproc_replaces_the_defaulted_one() -> None:
    env = injected_env(job(master=False, nproc=None, elastic={"nProcPerNode": 4}), "Worker", 0)
    assert env["PET_NPROC_PER_NODE"] == "4"
    with pytest.raises(OperatorEnvError, match=r"must not be used with spec\.nprocPerNode"):
        injected_env(job(master=False, nproc="2", elastic={"nProcPerNode": 4}), "Worker", 0)


def test_an_elastic_job_needs_workers() -> None:
    with pytest.raises(OperatorEnvError, match="needs a Worker replica spec"):
        injected_env(job(workers=None, elastic={}), "Master", 0)


def test_without_a_master_the_process_count_is_still_set() -> None:
    assert injected_env(job(master=False), "Worker", 1) == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "8",
        "PET_NNODES": "3",
    }
    # Unset in the spec: the defaulter's "auto" is what the operator passes.
    assert injected_env(job(master=False, nproc=None), "Worker", 0)["PET_NPROC_PER_NODE"] == "auto"


def test_pods_are_named_and_ordered_like_the_operator_does() -> None:
    assert replica_pods(job(workers=2)) == [("Master", 0), ("Worker", 0), ("Worker", 1)]
    assert pod_name("big", "Worker", 1) == "big-worker-1"


def test_replica_outside_the_spec_is_rejected() -> None:
    with pytest.raises(OperatorEnvError, match=r"Worker index 3 is outside 0\.\.2"):
        injected_env(job(), "Worker", 3)
    with pytest.raises(OperatorEnvError, match="no 'Worker' replica spec"):
        injected_env(job(workers=None), "Worker", 0)
