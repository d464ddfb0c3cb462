"""EnvironmentSecret: a Secret the stack owns whose values the training container reads through
`secretKeyRef`: `<job>-env`, `job.secretEnv`'s values, and `<job>-s3-credentials`, the object
storage's credentials (`checkpoints.accessKeyId`, `checkpoints.secretAccessKey`).

Why a Secret the stack owns: a value in the pod spec (`env[].value`) is plain text in the job's
manifest, in Pulumi's state and preview, in `make render` and to anyone who may read the job.
Here each value travels as a secret Output from the stack's config (components/settings.py
wraps them) into this one object's `data`, which Pulumi encrypts in state and masks in previews
(`additional_secret_outputs`); the job only names the Secret and the key. `pulumi destroy`
deletes it with the job. A changed value reaches the pods when they next start (the job's spec,
which names only the key, does not change).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


class EnvironmentSecret(pulumi.ComponentResource):
    """An Opaque Secret, one key per variable it feeds (`job.secretEnv`'s, or the storage's
    `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`).

    `manifest` is the Secret from `stack_objects`; the Kubernetes provider comes from the
    parent's `providers`.
    """

    secret_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        manifest: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:EnvironmentSecret", name, None, opts)
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
