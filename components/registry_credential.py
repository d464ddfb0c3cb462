"""RegistryCredential: the image pull secret, so the job's pods can pull from a private registry.

The password only ever travels as a secret Output: TrainingEnvironment hands `stack_objects` the
password as one, which assembles the dockerconfigjson with Output.json_dumps and encodes it inside
an apply, so state and `pulumi stack output` show `[secret]`, never the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


class RegistryCredential(pulumi.ComponentResource):
    """A kubernetes.io/dockerconfigjson Secret named after the job.

    `manifest` is the pull Secret from `stack_objects`; the Kubernetes provider comes from the
    parent's `providers`.
    """

    secret_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        manifest: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:RegistryCredential", name, None, opts)
        self.secret = k8s.core.v1.Secret(
            f"{name}-secret",
            metadata=manifest["metadata"],
            type=manifest["type"],
            data=manifest["data"],
            opts=pulumi.ResourceOptions(
                parent=self, additional_secret_outputs=["data", "stringData"]
            ),
        )
        self.secret_name = self.secret.metadata.apply(lambda metadata: metadata.name)
        self.register_outputs({"secretName": self.secret_name})
