"""builders/manifests.py with Kueue (issue 32): `job.queue` and `job.priorityClass` label the
job object of either API, and nothing else the stack makes."""

from __future__ import annotations

from typing import Any

import pytest

from builders.job_apis import api_of_settings
from builders.manifests import (
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    checkpoint_reader_pod_manifest,
)
from builders.stack_objects import stack_objects
from settings.stack import StackSettings, parse_settings

IMAGE = "registry.example.com/ml/trainer@sha256:" + "a" * 64
KUEUE_LABELS = {KUEUE_QUEUE_LABEL, KUEUE_PRIORITY_LABEL}
API = pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])


def settings_for(api: str, **job: Any) -> StackSettings:
    values = {
        "image": {"repository": "registry.example.com/ml/trainer"},
        "job": {"name": "queued", "api": api, **job},
    }
    return parse_settings(values, stack="dev")


def labelled_objects(settings: StackSettings) -> dict[str, dict[str, str]]:
    """The labels of everything the stack makes that carries any, and of the job's pods as its
    controller makes them, by where they sit."""
    objects = stack_objects(settings, image=IMAGE, password=None)
    labelled = {
        f"{manifest['kind']}/{manifest['metadata']['name']}": manifest["metadata"].get("labels")
        or {}
        for manifest in objects.in_apply_order()
    }
    for role in api_of_settings(settings).pods(objects.job, objects.runtime):
        labelled[f"pod/{role.name}"] = dict(role.template.get("metadata", {}).get("labels") or {})
    return labelled


@API
def test_a_queued_job_carries_kueues_labels_and_no_pod_does(api: str) -> None:
    settings = settings_for(api, queue="team-a", priorityClass="high")
    objects = stack_objects(settings, image=IMAGE, password=None)
    labels = objects.job["metadata"]["labels"]
    assert (labels[KUEUE_QUEUE_LABEL], labels[KUEUE_PRIORITY_LABEL]) == ("team-a", "high")
    # On a pod, Kueue's pod integration would admit each pod on its own, not the job whole.
    for where, object_labels in labelled_objects(settings).items():
        if where != f"{objects.job['kind']}/{objects.job['metadata']['name']}":
            assert not KUEUE_LABELS & set(object_labels), where
    reader = checkpoint_reader_pod_manifest(
        settings, name="reader", image=IMAGE, pull_secret=None, node=None, deadline_seconds=60
    )
    assert not KUEUE_LABELS & set(reader["metadata"]["labels"])


@API
def test_a_job_without_a_queue_has_no_kueue_label(api: str) -> None:
    settings = settings_for(api)
    for where, labels in labelled_objects(settings).items():
        assert not KUEUE_LABELS & set(labels), where


@API
def test_the_job_is_not_created_suspended_by_the_stack(api: str) -> None:
    """Kueue's webhook suspends a queued job as it is created and un-suspends it on admission: a
    `suspend: true` of the stack's own would be applied again by the next `pulumi up` that
    changes the job, stopping an admitted job."""
    job = stack_objects(settings_for(api, queue="team-a"), image=IMAGE, password=None).job
    spec = job["spec"]
    assert "suspend" not in spec and "suspend" not in spec.get("runPolicy", {})
