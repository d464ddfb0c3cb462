"""What the example Pulumi programs (examples/platform-program, examples/stack-references) are
compared with: this repository's own program, run under the same mocks for a stack file of the
same settings, must register the same resources with the same values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.pulumi_harness import PROJECT, ProgramResult, RegisteredResource, Secret

PROVIDER_PREFIX = "pulumi:providers:"


def environment_resources(result: ProgramResult) -> dict[str, dict[str, Any]]:
    """The training environment's resources by name, without the providers (the example's are
    its own): their type, inputs (secrets marked), options and hooks."""
    assert result.error is None, result.error
    return {
        resource.name: {
            "type": resource.type,
            "inputs": comparable(resource.inputs),
            "retain_on_delete": resource.retain_on_delete,
            "delete_before_replace": resource.delete_before_replace,
            "replace_on_changes": resource.replace_on_changes,
            "additional_secret_outputs": resource.additional_secret_outputs,
            "hooks": resource.hooks,
        }
        for resource in result.resources
        if resource.type.startswith(f"{PROJECT}:") or is_kubernetes_object(resource)
    }


def is_kubernetes_object(resource: RegisteredResource) -> bool:
    return resource.custom and resource.type.startswith("kubernetes:")


def stack_file(directory: Path, stack: str, settings: dict[str, Any]) -> Path:
    """`Pulumi.<stack>.yaml` of this repository's program with `settings` (camelCase keys), the
    default providers disabled as in the committed stacks."""
    config: dict[str, Any] = {"pulumi:disable-default-providers": ["kubernetes", "docker"]}
    config.update({f"{PROJECT}:{key}": value for key, value in settings.items()})
    path = directory / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return path


def comparable(value: Any) -> Any:
    """A registered value with each secret as `{"secret": value}`: equal when the values and
    what is secret in them are."""
    if isinstance(value, Secret):
        return {"secret": comparable(value.value)}
    if isinstance(value, dict):
        return {key: comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value
