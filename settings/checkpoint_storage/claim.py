"""`checkpoints.storage: claim` (the default): a PersistentVolumeClaim every pod of the job
mounts, the tutorial's ReadWriteMany PVC. The stack creates it as `<job>-checkpoints` and keeps it
and its data on destroy (`retainOnDestroy`), or mounts `existingClaim`, someone else's, which it
never manages. `make checkpoint` reads it through a reader pod that mounts it read-only; `make
local` puts its mount path in a directory of this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from settings.checkpoint_storage import CheckpointStorage
from settings.values import refusal

if TYPE_CHECKING:
    from settings.stack import CheckpointSettings, StackSettings


class ClaimStorage(CheckpointStorage):
    name = "claim"
    keys = ("size", "storageClass", "accessMode", "mountPath", "retainOnDestroy", "existingClaim")
    where = "on the claim"
    without_keys_of_others = "this stack keeps its checkpoints on a claim"

    def check_stack(self, settings: StackSettings) -> None:
        checkpoints = settings.checkpoints
        if checkpoints.access_mode == "ReadWriteOncePod" and settings.job.nodes != 1:
            raise refusal(
                "checkpoints.accessMode",
                checkpoints.access_mode,
                f"ReadWriteOncePod lets one pod mount the claim but job.nodes is "
                f"{settings.job.nodes}; use ReadWriteMany (or ReadWriteOnce, which co-locates the "
                "pods on one node)",
            )

    def root(self, checkpoints: CheckpointSettings) -> str:
        return checkpoints.mount_path

    def mount_path(self, checkpoints: CheckpointSettings) -> str:
        return checkpoints.mount_path

    def volume_source(self, settings: StackSettings, *, read_only: bool = False) -> dict[str, Any]:
        source: dict[str, Any] = {"claimName": self.claim(settings)}
        if read_only:
            source["readOnly"] = True
        return {"persistentVolumeClaim": source}

    def claim(self, settings: StackSettings) -> str:
        return settings.checkpoints.existing_claim or f"{settings.job.name}-checkpoints"

    def claim_spec(self, settings: StackSettings) -> dict[str, Any] | None:
        checkpoints = settings.checkpoints
        if checkpoints.existing_claim is not None:  # someone else's: mounted, never owned
            return None
        spec: dict[str, Any] = {
            "accessModes": [checkpoints.access_mode],
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": checkpoints.size}},
        }
        if checkpoints.storage_class is not None:
            spec["storageClassName"] = checkpoints.storage_class
        return spec

    def retains_claim(self, checkpoints: CheckpointSettings) -> bool:
        return checkpoints.retain_on_destroy

    def co_locates_pods(self, checkpoints: CheckpointSettings) -> bool:
        return checkpoints.access_mode == "ReadWriteOnce"


STORAGE = ClaimStorage()
