"""The pods a stack's job makes, as its job API's controller makes them from the stack's
objects, and what the tests read of them: one home for the manifests tests of your own code and
of object storage."""

from __future__ import annotations

from typing import Any

from builders.job_apis import api_of_settings
from builders.stack_objects import stack_objects
from settings.stack import StackSettings


def pods(settings: StackSettings, image: str) -> list[dict[str, Any]]:
    """Every pod template the job's pods are made from."""
    objects = stack_objects(settings, image=image, password=None)
    return [
        dict(role.template) for role in api_of_settings(settings).pods(objects.job, objects.runtime)
    ]


def training_container(pod: dict[str, Any]) -> dict[str, Any]:
    [container] = pod["spec"]["containers"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in container["env"]}
