"""The storage of the cluster's claims: a StorageClass with no provisioner and volumes made
beforehand, so claims bind as on a cluster with a provisioner. The plane's volumes (hostPath, on
this machine or inside a kind node) and the real node's (`local`, given to the pod's fsGroup)
differ only in where their data lives: one manifest for both."""

from __future__ import annotations

from typing import Any

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def storage_class(name: str, *, default: bool = False) -> dict[str, Any]:
    """A class whose claims bind at once to a volume made beforehand, which it keeps."""
    metadata: dict[str, Any] = {"name": name}
    if default:
        metadata["annotations"] = {DEFAULT_CLASS_ANNOTATION: "true"}
    return {
        "metadata": metadata,
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
        "reclaimPolicy": "Retain",
    }


def persistent_volume(name: str, storage_class: str, source: dict[str, Any]) -> dict[str, Any]:
    """A volume of `storage_class` that any claim's size and access mode fit; `source` says
    where its data lives (`hostPath`, `local` with its node affinity)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "20Ti"},
            "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "volumeMode": "Filesystem",
            **source,
        },
    }
