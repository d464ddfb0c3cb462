"""The bucket as the stack's checkpoint storage: what `make local` makes of it on this machine
(the rest, through the settings and the manifests: tests/builders/test_manifests_s3.py,
tests/components/test_program_s3.py)."""

from __future__ import annotations

import pytest

from settings.checkpoint_storage import kept_at
from settings.stack import CheckpointSettings, parse_settings

IMAGE = {"image": {"repository": "registry.example.com/ml/trainer"}}


def checkpoints(**values: object) -> CheckpointSettings:
    return parse_settings({**IMAGE, "checkpoints": {"storage": "s3", **values}}).checkpoints


def test_a_bucket_root_keeps_any_stacks_run_there() -> None:
    claim = parse_settings(IMAGE).checkpoints
    moved = kept_at(claim, "s3://team-ckpt/runs/a")
    assert moved is not None
    assert (moved.storage, moved.root) == ("s3", "s3://team-ckpt/runs/a")
    assert kept_at(claim, "gs://team-ckpt") is None  # no storage has such roots
    assert kept_at(claim, "s3://team-ckpt/runs/a/").root == "s3://team-ckpt/runs/a"  # type: ignore[union-attr]


@pytest.mark.parametrize("url", ["s3://", "s3:///runs"])
def test_a_bucket_root_without_a_bucket_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"expected s3://BUCKET or s3://BUCKET/PREFIX"):
        kept_at(parse_settings(IMAGE).checkpoints, url)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("s3://Team_Ckpt", "the bucket: expected an S3 bucket name"),
        ("s3://ok-bucket/a//b", "the prefix"),
    ],
)
def test_a_bucket_root_that_breaks_a_rule_says_which_part(url: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        kept_at(parse_settings(IMAGE).checkpoints, url)


def test_this_machine_reaches_the_bucket_as_its_environment_says() -> None:
    stack = checkpoints(bucket="team-ckpt", endpoint="http://minio.storage:9000")
    here = stack.backend.on_this_machine(stack, {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000"})
    assert here.client_environment == {
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    assert stack.backend.on_this_machine(stack, {}).endpoint == "http://minio.storage:9000"


def test_a_local_container_gets_this_environments_key_only_when_the_stack_has_none() -> None:
    environ = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key", "HOME": "/root"}
    bare = checkpoints(bucket="team-ckpt")
    assert bare.backend.machine_credentials(bare, environ) == {
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "key",
    }
