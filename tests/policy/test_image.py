"""image-pinned-by-digest: training images are digest pins, never a tag or latest."""

from __future__ import annotations

import pytest

from policy.rules.image import image_pinned_by_digest, image_reference_problem
from policy.rules.model import PYTORCHJOB_TYPE, SECRET_TYPE, UNKNOWN
from tests.policy import samples

MASTER_IMAGE = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image"


def with_image(image: object) -> dict:
    job = samples.pytorchjob()
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["image"] = image
    return job


def test_digest_pinned_job_passes() -> None:
    assert image_pinned_by_digest(PYTORCHJOB_TYPE, samples.pytorchjob()) == []


def test_other_resource_types_are_ignored() -> None:
    assert image_pinned_by_digest(SECRET_TYPE, {"image": "x:latest"}) == []


def test_bare_tag_fires_for_every_replica_and_names_the_field() -> None:
    messages = image_pinned_by_digest(PYTORCHJOB_TYPE, with_image("registry.example.com/t:v1"))
    assert len(messages) == 2
    assert messages[0].startswith(f"{MASTER_IMAGE} 'registry.example.com/t:v1' is a bare tag")
    assert "Worker" in messages[1]


@pytest.mark.parametrize("image", ["trainer", "trainer:latest", "localhost:5001/trainer"])
def test_latest_or_untagged_fires(image: str) -> None:
    # localhost:5001 is a registry port, not a tag: the reference still means :latest.
    assert "moving tag 'latest'" in (image_reference_problem(image) or "")


@pytest.mark.parametrize(
    "image",
    [
        "localhost:5001/trainer:v2",
        "trainer@sha256:" + "AB" * 32,  # digests are lower-case hex
        "trainer@sha256:abc",
    ],
)
def test_not_a_digest_pin_fires(image: str) -> None:
    assert image_reference_problem(image) is not None


def test_tag_plus_digest_is_a_pin() -> None:
    assert image_reference_problem("nvcr.io/nvidia/pytorch:24.07-py3@sha256:" + "0f" * 32) is None


def test_missing_image_fires() -> None:
    assert image_reference_problem(None) == "is missing"


def test_init_container_tag_fires() -> None:
    job = samples.pytorchjob()
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["initContainers"] = [{"name": "fetch", "image": "busybox:1.36"}]
    messages = image_pinned_by_digest(PYTORCHJOB_TYPE, job)
    assert len(messages) == 1
    assert "initContainers[0].image 'busybox:1.36' is a bare tag" in messages[0]


def test_image_unknown_during_preview_does_not_fire() -> None:
    assert image_pinned_by_digest(PYTORCHJOB_TYPE, with_image(UNKNOWN)) == []
