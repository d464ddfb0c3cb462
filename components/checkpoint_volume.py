"""CheckpointVolume: the claim the job writes checkpoints to, protected from loss.

With `checkpoints.retainOnDestroy` (the default) the PVC carries `retain_on_delete`: `pulumi
destroy` (or a replacement) only forgets it, so the claim and its data stay in the cluster and a
later stack can mount it with `checkpoints.existingClaim`. Without it, destroy deletes the claim.

Which changes replace the claim (Kubernetes forbids changing them in place): `accessMode`,
`storageClass`, the volume mode and the claim's name (job name) or namespace. Growing `size` is an
in-place update that works when the StorageClass allows volume expansion; shrinking is rejected.
With retention on, a replacement cannot create the new claim while the old one still exists under
the same name: delete or rename it deliberately (the data is never removed behind your back).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.settings import CheckpointSettings


class CheckpointVolume(pulumi.ComponentResource):
    """The checkpoint PVC, or a reference to `checkpoints.existingClaim`.

    `claim` is the PVC manifest from `stack_objects`, None when the stack mounts an existing claim.
    The Kubernetes provider comes from the parent's `providers`.
    """

    claim_name: pulumi.Output[str]
    claim: k8s.core.v1.PersistentVolumeClaim | None

    def __init__(
        self,
        name: str,
        checkpoints: CheckpointSettings,
        claim: Mapping[str, Any] | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:CheckpointVolume", name, None, opts)
        if claim is None:
            # Someone else owns that claim: mount it, never manage (or delete) it.
            if checkpoints.existing_claim is None:
                raise ValueError("without a claim manifest, checkpoints.existingClaim must be set")
            self.claim = None
            self.claim_name = pulumi.Output.from_input(checkpoints.existing_claim)
        else:
            self.claim = k8s.core.v1.PersistentVolumeClaim(
                f"{name}-claim",
                metadata=claim["metadata"],
                spec=claim["spec"],
                opts=pulumi.ResourceOptions(
                    parent=self, retain_on_delete=checkpoints.retain_on_destroy
                ),
            )
            self.claim_name = self.claim.metadata.apply(lambda metadata: metadata.name)
        self.register_outputs({"claimName": self.claim_name})
