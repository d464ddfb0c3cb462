"""StackSecret: a Secret the stack owns, whose values only ever travel as secret Outputs: the
image pull secret `<job>-registry` (kubernetes.io/dockerconfigjson, from `registry` and
`registryPassword`), `<job>-env` (`job.secretEnv`'s values) and `<job>-s3-credentials` (the
checkpoint storage's credentials), the last two read by the training container through
`secretKeyRef`.

Why Secrets the stack owns: a value in the pod spec (`env[].value`) is plain text in the job's
manifest, in Pulumi's state and preview, in `make render` and to anyone who may read the job.
Here each value travels as a secret Output from the stack's config (settings/stack.py wraps
them; the pull secret's dockerconfigjson is assembled with Output.json_dumps inside an apply)
into this one object's `data`, which Pulumi encrypts in state and masks in previews
(`additional_secret_outputs`); the job only names the Secret and the key. `pulumi destroy`
deletes it with the job. A changed value reaches the pods when they next start (the job's spec,
which names only the key, does not change).

One component for the three: they differ only in their manifest, which `stack_objects` builds.
The types it had before (RegistryCredential, EnvironmentSecret) are its aliases, so a stack that
was brought up with them moves its Secrets over without replacing them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

TYPE = "pytorch-distributed:index:StackSecret"
PREVIOUS_TYPES = (
    "pytorch-distributed:index:RegistryCredential",
    "pytorch-distributed:index:EnvironmentSecret",
)


class StackSecret(pulumi.ComponentResource):
    """One Secret of the stack, as `stack_objects` declares it (pull, environment or storage).

    `manifest` is the Secret's manifest; the Kubernetes provider comes from the parent's
    `providers`.
    """

    secret_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        manifest: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        aliases = [pulumi.Alias(type_=previous) for previous in PREVIOUS_TYPES]
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=aliases))
        super().__init__(TYPE, name, None, opts)
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
