"""provider/: the plugin directory `pulumi package add` and `pulumi package get-schema` run. The
CLI runs provider/__main__.py in its own virtualenv (provider/.venv, with this repository's
package installed from the directory above) and the schema lists TrainingEnvironment with its
typed arguments and the stack outputs.

It runs the real CLI, with the providers the package's dependencies name, so it is a real-engine
test: `make e2e` runs it with the tools `make e2e-tools` builds (under `make test`, where those
may not be built yet, it was skipped on every cold machine). The first run creates
provider/.venv from PyPI."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib

import pytest
from pydantic.alias_generators import to_camel

from components.settings import TOP_LEVEL_KEYS
from components.training_environment import StackOutputs
from tests.conftest import REPO_ROOT
from tests.e2e.conftest import Toolchain

PACKAGE_TOKEN = "pytorch-distributed:index:TrainingEnvironment"
PROVIDERS = {"kubernetes": "4.25.0", "docker": "4.11.2"}  # requirements.txt's pins


@pytest.fixture(scope="module")
def schema(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("pulumi-home")
    env = {
        **os.environ,
        "PATH": f"{toolchain.pulumi.parent}{os.pathsep}{os.environ['PATH']}",
        "PULUMI_HOME": str(home),
        "PULUMI_SKIP_UPDATE_CHECK": "1",
    }
    for package, version in PROVIDERS.items():
        binary = toolchain.provider(package)
        if binary is None:
            continue  # a CLI of the user's own (PD_E2E_PULUMI) acquires its plugins itself
        subprocess.run(
            ["pulumi", "plugin", "install", "resource", package, version, "--file", str(binary)],
            env=env,
            capture_output=True,
            check=True,
        )
    done = subprocess.run(
        ["pulumi", "package", "get-schema", str(REPO_ROOT / "provider")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
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
