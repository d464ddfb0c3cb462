"""builders/stack_objects.py: which objects one stack applies, each the builders' manifest."""

from __future__ import annotations

from builders.job_apis.pytorchjob import pytorchjob_manifest
from builders.manifests import checkpoint_claim_manifest, registry_secret_manifest
from builders.network_policy import network_policy_manifest
from builders.stack_objects import stack_objects
from settings.stack import StackSettings
from tests.builders.stack_settings import IMAGE, settings_for


def kinds(settings: StackSettings) -> list[str]:
    objects = stack_objects(settings, image=IMAGE, password="not-a-real-password")
    return [manifest["kind"] for manifest in objects.in_apply_order()]


def test_stack_objects_decides_which_objects_exist() -> None:
    registry = {"server": "registry.example.com", "username": "robot"}
    # The NetworkPolicy comes first: the job's pods start isolated.
    assert kinds(settings_for()) == ["NetworkPolicy", "PersistentVolumeClaim", "PyTorchJob"]
    assert kinds(settings_for(registry=registry)) == [
        "NetworkPolicy",
        "Secret",
        "PersistentVolumeClaim",
        "PyTorchJob",
    ]
    shared = settings_for(registry=registry, checkpoints={"existingClaim": "shared-ckpt"})
    assert kinds(shared) == ["NetworkPolicy", "Secret", "PyTorchJob"]
    open_network = settings_for(registry=registry, network={"policy": False})
    assert kinds(open_network) == ["Secret", "PersistentVolumeClaim", "PyTorchJob"]
    objects = stack_objects(shared, image=IMAGE, password="p@ss")
    assert objects.claim is None
    assert objects.pull_secret == registry_secret_manifest(shared, password="p@ss")
    assert objects.job == pytorchjob_manifest(shared, image=IMAGE)
    assert objects.network_policy == network_policy_manifest(shared)
    assert stack_objects(open_network, image=IMAGE, password=None).network_policy is None
    without_registry = stack_objects(settings_for(), image=IMAGE, password=None)
    assert without_registry.pull_secret is None
    assert without_registry.claim == checkpoint_claim_manifest(settings_for())
