"""The cluster's claim storage: one volume manifest, whatever holds its data."""

from __future__ import annotations

from cluster.volumes import persistent_volume, storage_class


def test_a_volume_fits_any_claim_and_keeps_its_data_where_its_source_says() -> None:
    source = {"local": {"path": "/v/pv-0"}, "nodeAffinity": {"required": {}}}
    volume = persistent_volume("real-node-pv-0", "real-node", source)
    spec = volume["spec"]
    assert volume["metadata"] == {"name": "real-node-pv-0"}
    assert (spec["storageClassName"], spec["persistentVolumeReclaimPolicy"]) == (
        "real-node",
        "Retain",
    )
    assert set(spec["accessModes"]) == {"ReadWriteOnce", "ReadWriteMany"}
    assert (spec["local"], spec["nodeAffinity"]) == (source["local"], source["nodeAffinity"])


def test_only_the_planes_class_is_the_default() -> None:
    assert "annotations" not in storage_class("real-node")["metadata"]
    annotations = storage_class("local-hostpath", default=True)["metadata"]["annotations"]
    assert annotations == {"storageclass.kubernetes.io/is-default-class": "true"}
