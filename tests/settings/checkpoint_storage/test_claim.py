"""The claim as the stack's checkpoint storage: which claim, created or mounted, kept or not
(its manifests: tests/builders/test_manifests.py)."""

from __future__ import annotations

from settings.stack import parse_settings

IMAGE = {"image": {"repository": "registry.example.com/ml/trainer"}}


def test_the_stack_creates_and_keeps_its_own_claim() -> None:
    settings = parse_settings({**IMAGE, "job": {"name": "run-a"}})
    storage = settings.checkpoints.backend
    assert storage.claim(settings) == "run-a-checkpoints"
    assert storage.claim_spec(settings) == {
        "accessModes": ["ReadWriteMany"],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": "10Ti"}},
    }
    assert storage.retains_claim(settings.checkpoints)
    assert storage.volume_source(settings, read_only=True) == {
        "persistentVolumeClaim": {"claimName": "run-a-checkpoints", "readOnly": True}
    }


def test_an_existing_claim_is_mounted_never_created() -> None:
    settings = parse_settings({**IMAGE, "checkpoints": {"existingClaim": "shared"}})
    storage = settings.checkpoints.backend
    assert (storage.claim(settings), storage.claim_spec(settings)) == ("shared", None)


def test_a_read_write_once_claim_puts_the_pods_on_one_node() -> None:
    once = parse_settings({**IMAGE, "checkpoints": {"accessMode": "ReadWriteOnce"}}).checkpoints
    many = parse_settings(IMAGE).checkpoints
    assert once.backend.co_locates_pods(once) and not many.backend.co_locates_pods(many)
