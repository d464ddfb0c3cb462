"""The stacks the builders' tests start from and what they read of a PyTorchJob: one home for the
tests of builders/manifests.py, builders/stack_objects.py and builders/job_apis/pytorchjob.py."""

from __future__ import annotations

from typing import Any

from settings.stack import StackSettings, parse_settings

IMAGE = "registry.example.com/ml/trainer@sha256:" + "b" * 64


def settings_for(**sections: Any) -> StackSettings:
    values: dict[str, Any] = {"image": {"repository": "registry.example.com/ml/trainer"}}
    values.update(sections)
    return parse_settings(values, password=None)


def elastic_settings(**job: Any) -> StackSettings:
    """A 3-pod job named "elastic" with `job` on top."""
    values: dict[str, Any] = {
        "image": {"repository": "registry.example.com/ml/trainer"},
        "job": {"name": "elastic", "nodes": 3, **job},
    }
    return parse_settings(values, password=None)


def elastic(**extra: Any) -> StackSettings:
    return elastic_settings(elastic={"minNodes": 1, **extra}, batchSize=16, gpusPerNode=2)


def replicas(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["pytorchReplicaSpecs"]


def container(manifest: dict[str, Any], replica_type: str = "Master") -> dict[str, Any]:
    [only] = replicas(manifest)[replica_type]["template"]["spec"]["containers"]
    return only
