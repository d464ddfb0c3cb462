"""`checkpoints.storage: s3`: a bucket of an S3-compatible object store (AWS S3, MinIO, Ceph
RGW, ...) that the trainer writes to over the network (trainer/storage/s3.py): no claim, no
mount. The pods get boto3's own variables: the endpoint and region in plain text, the credentials
(`accessKeyId` with `secretAccessKey`, secrets) from the stack's Secret by reference, or none (the
pods' own identity: IRSA, workload identity). `make checkpoint` reads the bucket straight from
this machine; `make local` keeps the run in the bucket, reached as this environment says."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, get_args

from pydantic import ValidationError

from settings.checkpoint_storage import CheckpointStorage
from settings.values import (
    REDACTED,
    S3_ACCESS_KEY_ID_ENV,
    S3_ENDPOINT_ENV,
    S3_REGION_ENV,
    S3_SECRET_ACCESS_KEY_ENV,
    Allowed,
    S3Bucket,
    S3Prefix,
    is_secret_value,
    refusal,
)

if TYPE_CHECKING:
    from settings.stack import CheckpointSettings, StackSettings

URL_PREFIX = "s3://"
CREDENTIAL_KEYS = ("accessKeyId", "secretAccessKey")
# The Secret's keys are the variables the pods read them as, so `kubectl describe` of a pod names
# the same thing twice; by the settings' attribute.
CREDENTIAL_ENV = {
    "access_key_id": S3_ACCESS_KEY_ID_ENV,
    "secret_access_key": S3_SECRET_ACCESS_KEY_ENV,
}
# The parts of a root, by their settings' names, and the rules they follow there.
ROOT_PARTS = {"bucket": S3Bucket, "prefix": S3Prefix}
# What a container of a local run takes from this environment when the stack names no key.
MACHINE_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class S3Storage(CheckpointStorage):
    name = "s3"
    keys = ("bucket", "prefix", "endpoint", "region", "createBucket", *CREDENTIAL_KEYS)
    secret_keys = CREDENTIAL_KEYS
    where = "in the bucket"
    without_keys_of_others = "with s3 there is no claim"

    def check(self, checkpoints: CheckpointSettings, given: Mapping[str, Any]) -> None:
        if checkpoints.bucket is None:
            raise refusal(
                "bucket",
                None,
                "required when checkpoints.storage is s3: the bucket the checkpoints go to",
            )
        credentials = {key: given[key] for key in CREDENTIAL_KEYS if key in given}
        if len(credentials) == 1:
            [missing] = [key for key in CREDENTIAL_KEYS if key not in credentials]
            raise refusal(
                missing,
                None,
                f"checkpoints.{next(iter(credentials))} is set: the credentials go together, "
                "set both (pulumi config set --secret --path checkpoints.<key>) or neither (the "
                "pods' own identity: IRSA, workload identity)",
            )
        for key, value in credentials.items():
            if not is_secret_value(value):
                raise refusal(
                    key,
                    REDACTED,
                    f"expected a secret of the stack's config: pulumi config set --secret --path "
                    f"checkpoints.{key} VALUE (a credential is never plain text)",
                )

    def check_stack(self, settings: StackSettings) -> None:
        if settings.checkpoints.create_bucket and not settings.job.runs_trainer:
            raise refusal(
                "checkpoints.createBucket",
                True,
                "only the project's trainer creates the bucket (--create-bucket), and "
                "job.command runs your own code: create the bucket beforehand (or in your code) "
                "and leave createBucket out",
            )

    def root(self, checkpoints: CheckpointSettings) -> str:
        return URL_PREFIX + "/".join(
            part for part in (checkpoints.bucket, checkpoints.prefix) if part
        )

    def client_environment(self, checkpoints: CheckpointSettings) -> dict[str, str]:
        env = {S3_ENDPOINT_ENV: checkpoints.endpoint} if checkpoints.endpoint is not None else {}
        return {**env, S3_REGION_ENV: checkpoints.region}

    def credentials(self, checkpoints: CheckpointSettings) -> dict[str, Any]:
        if checkpoints.access_key_id is None:
            return {}
        return {env: getattr(checkpoints, attribute) for attribute, env in CREDENTIAL_ENV.items()}

    def at_root(self, checkpoints: CheckpointSettings, url: str) -> CheckpointSettings | None:
        if not url.startswith(URL_PREFIX):
            return None
        bucket, _, prefix = url[len(URL_PREFIX) :].partition("/")
        if not bucket:
            raise ValueError("expected s3://BUCKET or s3://BUCKET/PREFIX")
        try:
            return type(checkpoints)(
                storage=self.name,
                bucket=bucket,
                prefix=prefix.strip("/") or None,
                endpoint=checkpoints.endpoint,
                region=checkpoints.region,
                create_bucket=checkpoints.create_bucket,
                access_key_id=checkpoints.access_key_id,
                secret_access_key=checkpoints.secret_access_key,
            )
        except ValidationError as error:  # the bucket's or the prefix's rule
            part = str(error.errors()[0]["loc"][0])
            rule = ROOT_PARTS.get(part, S3Bucket)
            allowed = next(str(a) for a in get_args(rule) if isinstance(a, Allowed))
            raise ValueError(f"the {part}: {allowed}") from None

    def on_this_machine(
        self, checkpoints: CheckpointSettings, environ: Mapping[str, str]
    ) -> CheckpointSettings:
        return dataclasses.replace(
            checkpoints,
            endpoint=environ.get(S3_ENDPOINT_ENV) or checkpoints.endpoint,
            region=environ.get(S3_REGION_ENV) or checkpoints.region,
        )

    def machine_credentials(
        self, checkpoints: CheckpointSettings, environ: Mapping[str, str]
    ) -> dict[str, str]:
        if self.credentials(checkpoints):
            return {}
        return {name: environ[name] for name in MACHINE_CREDENTIALS if environ.get(name)}


STORAGE = S3Storage()
