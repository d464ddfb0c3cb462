"""A new kind of checkpoint storage is one module and one registration: a throwaway storage,
written to a temporary module here, is chosen by `checkpoints.storage` and rendered into a stack
that nothing else was told about (ARCHITECTURE.md's claim, held by a test)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from settings.checkpoint_storage import (
    register_storage,
    storage_named,
    storage_names,
    unregister_storage,
)
from settings.stack import SettingsError, load_stack_file, parse_settings
from tests.builders import pod_templates
from tests.builders.k8s_rules import validate_manifest
from tools.render import render

IMAGE = {"image": {"repository": "registry.example.com/ml/trainer"}}
THROWAWAY = '''
"""A node's own directory, mounted into every pod (one-node clusters only)."""

from typing import Any

from settings.checkpoint_storage import CheckpointStorage


class NodeDirectoryStorage(CheckpointStorage):
    name = "nodedir"
    keys = ("mountPath",)
    where = "in the node's directory"
    without_keys_of_others = "a node's directory has no claim and no bucket"

    def root(self, checkpoints: Any) -> str:
        return checkpoints.mount_path

    def mount_path(self, checkpoints: Any) -> str:
        return checkpoints.mount_path

    def volume_source(self, settings: Any, *, read_only: bool = False) -> dict[str, Any]:
        return {"hostPath": {"path": "/var/lib/training-runs", "type": "DirectoryOrCreate"}}


STORAGE = NodeDirectoryStorage()
'''


@pytest.fixture
def throwaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    (tmp_path / "node_directory_storage.py").write_text(THROWAWAY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("node_directory_storage")
    register_storage(module.STORAGE)
    try:
        yield module
    finally:
        unregister_storage(module.STORAGE.name)
        sys.modules.pop("node_directory_storage", None)


def test_a_registered_storage_is_a_value_of_checkpoints_storage(throwaway: ModuleType) -> None:
    assert storage_names() == ["claim", "s3", "nodedir"]
    assert storage_named("nodedir") is throwaway.STORAGE


def test_a_throwaway_storage_renders_a_stack_nothing_else_was_told_about(
    throwaway: ModuleType, tmp_path: Path
) -> None:
    stacks, out = tmp_path / "stacks", tmp_path / "out"
    stacks.mkdir()
    (stacks / "Pulumi.nodedir.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/ml/trainer}\n"
        "  pytorch-distributed:checkpoints: {storage: nodedir, mountPath: /runs}\n"
        "  pytorch-distributed:job: {name: run-nodedir}\n",
        encoding="utf-8",
    )
    settings = load_stack_file("nodedir", stacks)
    assert settings.checkpoint_dir == "/runs/run-nodedir"
    assert settings.checkpoint_claim is None

    paths = render(settings, out)

    documents = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in paths]
    # No claim, no Secret: the job and its NetworkPolicy.
    assert [document["kind"] for document in documents] == ["NetworkPolicy", "PyTorchJob"]
    for document in documents:
        validate_manifest(document)
    assert "/var/lib/training-runs" in paths[-1].read_text(encoding="utf-8")
    volume = {"name": "checkpoints", **throwaway.STORAGE.volume_source(settings)}
    for pod in pod_templates.pods(settings, "registry.example.com/ml/trainer:1"):
        assert volume in pod["spec"]["volumes"]
        container = pod_templates.training_container(pod)
        assert {"name": "checkpoints", "mountPath": "/runs"} in container["volumeMounts"]
        assert pod_templates.env_of(container)["CHECKPOINT_DIR"] == "/runs/run-nodedir"


def test_another_storages_key_is_refused_by_its_owner(throwaway: ModuleType) -> None:
    with pytest.raises(SettingsError) as refused:
        parse_settings({**IMAGE, "checkpoints": {"storage": "nodedir", "bucket": "team-ckpt"}})
    assert str(refused.value) == (
        "invalid config pytorch-distributed:checkpoints.bucket = 'team-ckpt': "
        "checkpoints.bucket is for checkpoints.storage: s3, and a node's directory has no claim "
        "and no bucket: set checkpoints.storage: s3 or leave the key out"
    )


def test_without_its_registration_the_name_is_refused() -> None:
    with pytest.raises(SettingsError) as refused:
        parse_settings({**IMAGE, "checkpoints": {"storage": "nodedir"}})
    assert str(refused.value) == (
        "invalid config pytorch-distributed:checkpoints.storage = 'nodedir': expected one of "
        "claim, s3"
    )
