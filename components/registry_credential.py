"""RegistryCredential: the image pull secret, so the job's pods can pull from a private registry.

The password only ever travels as a secret Output: the dockerconfigjson is assembled with
Output.json_dumps and encoded inside an apply, so state and `pulumi stack output` show
`[secret]`, never the value.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.manifests import registry_secret_manifest
from components.settings import StackSettings


class RegistryCredential(pulumi.ComponentResource):
    """A kubernetes.io/dockerconfigjson Secret named after the job."""

    secret_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        *,
        password: Any,
        provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:RegistryCredential", name, None, opts)
        manifest = registry_secret_manifest(settings, password=pulumi.Output.secret(password))
        self.secret = k8s.core.v1.Secret(
            f"{name}-secret",
            metadata=manifest["metadata"],
            type=manifest["type"],
            data=manifest["data"],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=provider,
                additional_secret_outputs=["data", "stringData"],
            ),
        )
        self.secret_name = self.secret.metadata.apply(lambda metadata: metadata.name)
        self.register_outputs({"secretName": self.secret_name})
