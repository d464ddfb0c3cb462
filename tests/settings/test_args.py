"""TrainingEnvironmentArgs (settings/args.py) is what settings/args_codegen.py
writes from the settings declarations, its schema lists every key, and arguments validate into
the same settings as the stack config of the same values."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pulumi.provider.experimental.analyzer import Analyzer

from components.training_environment import StackOutputs, TrainingEnvironment
from settings.args_codegen import ARGS_MODULE, GENERATOR, args_module_text
from settings.stack import (
    PASSWORD_KEY,
    REDACTED,
    SettingsError,
    _declared_keys,
    args_of_config,
    config_of_args,
    parse_args,
    parse_settings,
    stack_names,
)
from tests.conftest import REPO_ROOT


def test_the_committed_args_module_is_what_the_generator_writes() -> None:
    assert ARGS_MODULE.read_text(encoding="utf-8") == args_module_text(), (
        f"settings/args.py is stale: run `{GENERATOR}`"
    )


def _schema_keys(analyzed: dict[str, Any], properties: dict[str, Any], prefix: str) -> set[str]:
    """Every property path of the component's inputs (`job.volumes[].claim`)."""
    keys: set[str] = set()
    for name, prop in properties.items():
        key = f"{prefix}{name}"
        if prop.ref is None:  # an object is no row of the table; a list of objects is
            keys.add(key)
        ref = prop.ref or (prop.items.ref if prop.items is not None else None)
        if ref is not None:
            inner = analyzed[ref.rsplit(":", 1)[-1]].properties
            keys |= _schema_keys(analyzed, inner, key + ("[]." if prop.items else "."))
    return keys


def test_the_schema_has_every_declared_key_with_its_help() -> None:
    """What `pulumi package get-schema` lists: each settings key (the registry password inside
    `registry`), described with its declaration's help and default, and the stack outputs."""
    result = Analyzer("pytorch-distributed").analyze([TrainingEnvironment])
    component = result["component_definitions"]["TrainingEnvironment"]
    types = result["type_definitions"]
    declared = {key for key, _ in _declared_keys() if key != PASSWORD_KEY} | {"registry.password"}
    assert _schema_keys(types, component.inputs, "") == declared
    nodes = types["JobArgs"].properties["nodes"]
    assert nodes.type is not None and nodes.type.value == "integer"
    assert nodes.description == (
        "pods: 1 master (it trains) + `nodes - 1` workers (default: `2`; allowed: an integer "
        ">= 1 and <= 1000)"
    )
    assert [
        name for name, prop in types["RegistryArgs"].properties.items() if not prop.optional
    ] == [
        "server",
        "username",
    ]
    assert set(component.outputs) == {
        to_schema
        for to_schema in StackOutputs(*[None] * 8).by_name()  # type: ignore[arg-type]
    }


def test_no_arguments_are_the_default_settings() -> None:
    repository = {"image": {"repository": "registry.example.com/team/trainer"}}
    assert parse_args(repository) == parse_settings(repository)


@pytest.mark.parametrize("stack", stack_names())
def test_each_committed_stack_as_arguments_is_the_same_settings(stack: str) -> None:
    """The stack's program hands the component its config as arguments (`load_args`): the
    round trip through the attribute names loses and changes nothing."""
    document = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"))
    values = {
        key.removeprefix("pytorch-distributed:"): value
        for key, value in document["config"].items()
        if key.startswith("pytorch-distributed:") and key != f"pytorch-distributed:{PASSWORD_KEY}"
    }
    password = REDACTED if "registry" in values else None
    args = args_of_config(values, password)
    assert config_of_args(args) == (values, password)
    assert parse_args(args, stack=stack) == parse_settings(values, password=password, stack=stack)


def test_arguments_use_the_attribute_names() -> None:
    args = args_of_config(
        {"job": {"gpusPerNode": 0, "volumes": [{"claim": "d", "mountPath": "/d"}]}}
    )
    assert args == {"job": {"gpus_per_node": 0, "volumes": [{"claim": "d", "mount_path": "/d"}]}}


def test_an_unknown_argument_is_refused_by_name() -> None:
    with pytest.raises(SettingsError, match=r"unknown argument job\.gpusPerNode: .*gpus_per_node"):
        parse_args({"job": {"gpusPerNode": 0}})


def test_a_bad_value_is_the_stack_configs_error() -> None:
    with pytest.raises(SettingsError) as from_args:
        parse_args({"image": {"ref": "r.example.com/t:1", "build": False}, "job": {"nodes": 0}})
    with pytest.raises(SettingsError) as from_config:
        parse_settings({"image": {"ref": "r.example.com/t:1", "build": False}, "job": {"nodes": 0}})
    assert str(from_args.value) == str(from_config.value)
    assert "job.nodes" in str(from_args.value)


def test_another_languages_whole_numbers_are_integers_and_a_fraction_is_refused() -> None:
    """Through the component package every number is a float (a protobuf Struct): the YAML
    program's `nodes: 2` arrives as 2.0, a toleration's seconds too; a stack file's 2.0 is still
    refused, and so is 2.5 from anywhere."""
    image = {"ref": "r.example.com/t:1", "build": False}
    toleration = {
        "key": "gpu",
        "operator": "Exists",
        "effect": "NoExecute",
        "toleration_seconds": 30.0,
    }
    settings = parse_args(
        {"image": image, "job": {"nodes": 2.0, "total_epochs": 4.0, "tolerations": [toleration]}}
    )
    assert settings.job.nodes == 2 and isinstance(settings.job.nodes, int)
    assert settings.job.total_epochs == 4 and isinstance(settings.job.total_epochs, int)
    assert settings.job.tolerations[0].toleration_seconds == 30
    with pytest.raises(SettingsError, match=r"job\.nodes = 2\.5: expected an integer"):
        parse_args({"image": image, "job": {"nodes": 2.5}})
    with pytest.raises(SettingsError, match=r"job\.nodes = 2\.0: expected an integer"):
        parse_settings({"image": image, "job": {"nodes": 2.0}})


def test_a_registry_needs_its_password() -> None:
    registry = {"server": "registry.example.com", "username": "robot"}
    with pytest.raises(SettingsError, match=r"registryPassword: required when registry is set"):
        parse_args({"image": {"repository": "registry.example.com/t"}, "registry": registry})
    settings = parse_args(
        {
            "image": {"repository": "registry.example.com/t"},
            "registry": {**registry, "password": REDACTED},
        }
    )
    assert settings.registry is not None and settings.registry.password == REDACTED
