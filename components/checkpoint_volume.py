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


class CheckpointVolume(pulumi.ComponentResource):
    """The checkpoint PVC the stack owns, or a reference to a claim someone else owns.

    `claim` is the PVC manifest from `stack_objects` (the checkpoint storage's), None when the
    stack mounts an existing claim, `claim_name`; `retain`: keep it on destroy. The Kubernetes
    provider comes from the parent's `providers`.
    """

    claim_name: pulumi.Output[str]
    claim: k8s.core.v1.PersistentVolumeClaim | None

    def __init__(
        self,
        name: str,
        claim_name: str,
        claim: Mapping[str, Any] | None,
        *,
        retain: bool,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:CheckpointVolume", name, None, opts)
        if claim is None:
            # Someone else owns that claim: mount it, never manage (or delete) it.
            self.claim = None
            self.claim_name = pulumi.Output.from_input(claim_name)
        else:
            self.claim = k8s.core.v1.PersistentVolumeClaim(
                f"{name}-claim",
                metadata=claim["metadata"],
                spec=claim["spec"],
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=retain),
            )
            self.claim_name = self.claim.metadata.apply(lambda metadata: metadata.name)
        self.register_outputs({"claimName": self.claim_name})
