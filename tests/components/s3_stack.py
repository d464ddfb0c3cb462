"""One home for what turns a committed stack into one whose checkpoints are in object storage,
for the tests that run the program on it (tests/components/test_program_s3.py, the policy pack's
tests/policy/test_program_passes.py): the `checkpoints` override and the credentials, set as
secrets by their config paths."""

from __future__ import annotations

from typing import Any

KEY_ID = "AKIAS3STACKNOTREAL01"
SECRET_KEY = "s3-secret-key-not-real-5f0c"
S3_CREDENTIALS = {"checkpoints.accessKeyId": KEY_ID, "checkpoints.secretAccessKey": SECRET_KEY}
BUCKET = "team-ckpt"
PREFIX = "runs"
ENDPOINT = "http://minio.minio.svc:9000"
# The committed stacks' claim settings, left out (an s3 stack refuses them), and the bucket.
S3_CHECKPOINTS: dict[str, Any] = {
    "size": None,
    "accessMode": None,
    "mountPath": None,
    "retainOnDestroy": None,
    "storage": "s3",
    "bucket": BUCKET,
    "prefix": PREFIX,
    "endpoint": ENDPOINT,
}
