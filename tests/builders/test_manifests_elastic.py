"""builders/manifests.py for elastic jobs (`job.elastic`) and step checkpoints
(`job.saveEverySteps`): the PyTorchJob the operator's webhook admits, the gang's minimum on
Run:ai, and the entrypoint's arguments."""

from __future__ import annotations

import re
from typing import Any

import pytest

from builders.job_apis import api_of_settings
from builders.job_apis.pytorchjob import injected_env, pytorchjob_manifest, replica_pods
from builders.manifests import trainer_args
from policy.rules.operator import admission_violations
from settings.stack import SettingsError, StackSettings, parse_settings
from tests.builders.k8s_rules import validate_manifest

IMAGE = "registry.example.com/ml/trainer@sha256:" + "b" * 64


def settings_for(**job: Any) -> StackSettings:
    values: dict[str, Any] = {
        "image": {"repository": "registry.example.com/ml/trainer"},
        "job": {"name": "elastic", "nodes": 3, **job},
    }
    return parse_settings(values, password=None)


def elastic(**extra: Any) -> StackSettings:
    return settings_for(elastic={"minNodes": 1, **extra}, batchSize=16, gpusPerNode=2)


def test_an_elastic_job_is_workers_only_with_a_c10d_elastic_policy() -> None:
    manifest = pytorchjob_manifest(elastic(maxRestarts=5), image=IMAGE)
    spec = manifest["spec"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert spec["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 3,
        "rdzvBackend": "c10d",
        "maxRestarts": 5,
    }
    assert spec["nprocPerNode"] == "2"  # the current field; elasticPolicy.nProcPerNode is unset
    assert "schedulingPolicy" not in spec["runPolicy"]  # no gang scheduler on plain Kubeflow
    assert admission_violations(manifest) == []
    validate_manifest(manifest)
    assert api_of_settings(elastic()).rank0_pod(elastic()) == "elastic-worker-0"


def test_the_entrypoint_gets_torchruns_restarts_and_the_global_batch_of_all_pods() -> None:
    args = trainer_args(elastic(maxRestarts=5))
    assert args[:3] == ["--max-restarts", "5", "--"]
    # 16 per process x 2 processes x 3 pods, whatever number of pods the first rendezvous finds.
    assert args[args.index("--global-batch-size") + 1] == "96"
    assert "--global-batch-size" not in trainer_args(settings_for())


def test_every_pod_joins_the_rendezvous_on_worker_0_with_the_node_range() -> None:
    manifest = pytorchjob_manifest(elastic(), image=IMAGE)
    assert replica_pods(manifest) == [("Worker", 0), ("Worker", 1), ("Worker", 2)]
    for _, index in replica_pods(manifest):
        env = injected_env(manifest, "Worker", index)
        assert env["PET_NNODES"] == "1:3"
        assert env["PET_RDZV_ENDPOINT"] == "elastic-worker-0:23456"
        assert env["PET_RDZV_BACKEND"] == "c10d"
        assert env["PET_MAX_RESTARTS"] == "3"
        assert "PET_NODE_RANK" not in env and "MASTER_ADDR" not in env  # c10d assigns ranks


def test_on_runai_the_gang_minimum_is_the_fewest_nodes() -> None:
    values: dict[str, Any] = {
        "platform": "runai",
        "runaiProject": "team-a",
        "image": {"repository": "registry.example.com/ml/trainer"},
        "job": {"nodes": 4, "elastic": {"minNodes": 2}},
    }
    manifest = pytorchjob_manifest(parse_settings(values), image=IMAGE)
    assert manifest["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}
    assert manifest["spec"]["elasticPolicy"]["minReplicas"] == 2
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["schedulerName"] == "runai-scheduler"
    assert admission_violations(manifest) == []


def test_step_checkpoints_reach_the_trainer() -> None:
    args = trainer_args(settings_for(saveEverySteps=200))
    assert args[args.index("--save-every-steps") + 1] == "200"
    assert "--save-every-steps" not in trainer_args(settings_for())


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (
            {"elastic": {"minNodes": 4}},
            "job.elastic.minNodes = 4: at most job.nodes (3), the pods the job has",
        ),
        (
            {"elastic": {"minNodes": 1, "maxNodes": 5}},
            "job.elastic.maxNodes = 5: the job has job.nodes = 3 pods, the most it can train on",
        ),
        (
            {"elastic": {"minNodes": 1}, "maxRestarts": 2},
            "job.maxRestarts = 2: with job.elastic, torchrun's restarts are "
            "job.elastic.maxRestarts",
        ),
        ({"elastic": {}}, "missing config pytorch-distributed:job.elastic.minNodes: required"),
    ],
)
def test_an_elastic_setting_that_cannot_work_is_one_line_naming_the_key(
    job: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        settings_for(**job)
