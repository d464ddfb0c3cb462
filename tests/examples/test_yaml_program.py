"""examples/yaml-program: the Pulumi YAML program declares the training environment through the
component package with the platform program's values (the e2e suite previews both, and this
repository's stack of the same values, and compares what each would create), through its own
Kubernetes provider."""

from __future__ import annotations

from typing import Any

import yaml

from settings.stack import TOP_LEVEL_KEYS
from tests.conftest import REPO_ROOT
from tests.examples.test_platform_program import SAME_SETTINGS

EXAMPLE = REPO_ROOT / "examples" / "yaml-program"


def program() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLE / "Pulumi.yaml").read_text(encoding="utf-8"))


def test_the_environment_has_the_platform_programs_values() -> None:
    training = program()["resources"]["training"]
    assert training["type"] == "pytorch-distributed:index:TrainingEnvironment"
    assert training["properties"] == SAME_SETTINGS
    assert set(training["properties"]) <= set(TOP_LEVEL_KEYS)


def test_the_environment_goes_through_the_programs_own_provider() -> None:
    declared = program()
    assert declared["resources"]["cluster"]["type"] == "pulumi:providers:kubernetes"
    assert declared["resources"]["training"]["options"]["providers"] == ["${cluster}"]
    disabled = declared["config"]["pulumi:disable-default-providers"]["value"]
    assert set(disabled) == {"kubernetes", "docker"}


def test_the_program_exports_the_components_outputs() -> None:
    outputs = program()["outputs"]
    assert outputs == {name: f"${{training.{name}}}" for name in outputs}
    assert {"jobName", "logsCommand", "checkpointPath"} <= set(outputs)
