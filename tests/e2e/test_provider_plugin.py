"""provider/: the plugin directory `pulumi package add` and `pulumi package get-schema` run. The
CLI runs provider/__main__.py in its own virtualenv (provider/.venv, with the package installed
from the directory above; in the project's copy, so the checkout gets none) and the schema lists
TrainingEnvironment with its typed arguments and the stack outputs.

It runs the real CLI, with the providers the package's dependencies name, so it is a real-engine
test: `make e2e` runs it with the tools `make e2e-tools` builds (under `make test`, where those
may not be built yet, it was skipped on every cold machine). Each run creates provider/.venv
from PyPI (pip's cache)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from pydantic.alias_generators import to_camel

from components.training_environment import StackOutputs
from settings.stack import TOP_LEVEL_KEYS
from tests.conftest import REPO_ROOT
from tests.e2e.conftest import Project

PACKAGE_TOKEN = "pytorch-distributed:index:TrainingEnvironment"


@pytest.fixture(scope="module")
def schema(project: Project, package_checkout: Path) -> dict:
    """As a user's shell runs it: the README's variables, the CLI on PATH, the providers the
    project fixture installed from the files `make e2e-tools` built; in the project's copy, where
    the CLI leaves provider/.venv."""
    done = project.run(["pulumi", "package", "get-schema", str(package_checkout / "provider")])
    return json.loads(done.stdout)


def test_the_schema_lists_the_component_and_its_typed_arguments(schema: dict) -> None:
    component = schema["resources"][PACKAGE_TOKEN]
    assert schema["name"] == "pytorch-distributed"
    assert set(component["inputProperties"]) == set(TOP_LEVEL_KEYS)
    outputs = {to_camel(name) for name in StackOutputs.__dataclass_fields__}
    assert set(component["properties"]) == outputs
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert schema["version"] == project["project"]["version"]
    job = schema["types"]["pytorch-distributed:index:JobArgs"]["properties"]
    assert job["nodes"]["type"] == "integer"
    assert job["nodes"]["description"].startswith("pods: 1 master (it trains)")
    registry = schema["types"]["pytorch-distributed:index:RegistryArgs"]
    assert set(registry["required"]) == {"server", "username"}
    assert "password" in registry["properties"]
