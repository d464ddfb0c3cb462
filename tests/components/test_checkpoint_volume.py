"""components/checkpoint_volume.py under mocks, through the committed stacks' programs: the
claim's spec, and its retention on destroy (dev deletes it, prod keeps it)."""

from __future__ import annotations

from tests.components.conftest import FIELD_MANAGER_ONLY, PVC
from tests.pulumi_harness import ProgramResult


def test_checkpoint_claim_retention(dev: ProgramResult, prod: ProgramResult) -> None:
    dev_claim = dev.one(PVC)
    assert dev_claim.retain_on_delete is False
    assert dev_claim.inputs["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": "1Gi"}},
    }
    assert dev_claim.inputs["metadata"]["annotations"] == FIELD_MANAGER_ONLY
    prod_claim = prod.one(PVC)
    assert prod_claim.retain_on_delete is True
    assert prod_claim.protect is False  # destroy must succeed and leave the claim behind
    assert prod_claim.inputs["metadata"]["annotations"] == {
        **FIELD_MANAGER_ONLY,
        "pytorch-distributed/retain-on-destroy": "true",
    }
    assert prod_claim.inputs["spec"]["accessModes"] == ["ReadWriteMany"]
    assert prod_claim.inputs["spec"]["resources"]["requests"]["storage"] == "10Ti"
    assert prod_claim.inputs["spec"]["volumeMode"] == "Filesystem"
