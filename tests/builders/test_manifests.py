"""builders/manifests.py: the objects the stack applies, field by field, and their schemas."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from pathlib import Path
from typing import Any, get_args

import kubernetes_validate
import pulumi
import pytest

from builders.job_apis.pytorchjob import pytorchjob_manifest
from builders.manifests import (
    FIELD_MANAGER,
    FIELD_MANAGER_ANNOTATION,
    READER_MANAGER,
    TRAINER_ARGUMENTS,
    checkpoint_claim_manifest,
    checkpoint_reader_pod_manifest,
    common_labels,
    container_security_context,
    docker_config,
    pod_security_context,
    registry_secret_manifest,
    resource_names,
    trainer_args,
    trainer_argument,
    wait_annotations,
)
from builders.stack_objects import stack_objects
from policy.rules.model import PYTORCHJOB_TYPE
from policy.rules.operator import admission_violations
from policy.rules.pod_security import run_as_root
from settings.stack import (
    TRAINER_GID,
    TRAINER_UID,
    StackSettings,
    load_stack_file,
    parse_settings,
)
from settings.values import Parallelism
from tests.builders.k8s_rules import restricted_violations, validate_manifest
from tests.builders.stack_settings import IMAGE, container, replicas, settings_for
from trainer.cli import PARALLELISMS, parse_config
from trainer.storage.s3 import S3Storage


def test_resource_names() -> None:
    names = resource_names(settings_for(job={"name": "run-a"}))
    assert (names.job, names.claim, names.pull_secret) == ("run-a", "run-a-checkpoints", None)
    existing = resource_names(
        settings_for(
            checkpoints={"existingClaim": "shared-ckpt"},
            registry={"server": "registry.example.com", "username": "u"},
        )
    )
    assert (existing.claim, existing.pull_secret) == ("shared-ckpt", "pytorch-ddp-registry")


def test_runai_scheduler_and_labels() -> None:
    settings = settings_for(platform="runai", runaiProject="team-a")
    manifest = pytorchjob_manifest(settings, image=IMAGE)
    assert manifest["metadata"]["namespace"] == "runai-team-a"
    assert manifest["metadata"]["labels"]["project"] == "team-a"
    assert manifest["metadata"]["labels"]["runai/queue"] == "team-a"
    for replica in replicas(manifest).values():
        template = replica["template"]
        assert template["spec"]["schedulerName"] == "runai-scheduler"
        assert template["metadata"]["labels"]["project"] == "team-a"
        assert template["metadata"]["labels"]["runai/queue"] == "team-a"


def test_pull_secret_attached_when_registry_set() -> None:
    settings = settings_for(registry={"server": "registry.example.com", "username": "u"})
    manifest = pytorchjob_manifest(settings, image=IMAGE)
    for replica in replicas(manifest).values():
        assert replica["template"]["spec"]["imagePullSecrets"] == [{"name": "pytorch-ddp-registry"}]


def test_read_write_once_co_locates_replicas() -> None:
    settings = settings_for(checkpoints={"accessMode": "ReadWriteOnce"})
    manifest = pytorchjob_manifest(settings, image=IMAGE)
    for replica in replicas(manifest).values():
        affinity = replica["template"]["spec"]["affinity"]["podAffinity"]
        [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        selector = term["labelSelector"]["matchLabels"]
        # The selector must match the pods' own labels, or the first pod could never schedule.
        assert selector.items() <= replica["template"]["metadata"]["labels"].items()
    single = pytorchjob_manifest(
        settings_for(checkpoints={"accessMode": "ReadWriteOnce"}, job={"nodes": 1}), image=IMAGE
    )
    assert "affinity" not in replicas(single)["Master"]["template"]["spec"]


@pytest.mark.parametrize(
    ("wait_for", "expected"),
    [
        ("none", {"pulumi.com/skipAwait": "true"}),
        ("created", {}),
        # The job's hooks wait for these (components/job_outcome.py); the provider does not.
        ("running", {}),
        ("succeeded", {}),
    ],
)
def test_wait_annotations(wait_for: str, expected: dict[str, str]) -> None:
    settings = settings_for(job={"waitFor": wait_for})
    assert wait_annotations(settings) == expected
    metadata = pytorchjob_manifest(settings, image=IMAGE)["metadata"]
    assert metadata["annotations"] == {FIELD_MANAGER_ANNOTATION: FIELD_MANAGER, **expected}


def test_every_object_is_applied_under_one_field_manager() -> None:
    """pulumi-kubernetes reads the annotation for its server-side apply: a create that adopts an
    object an interrupted update made then owns the same fields, not a second set."""
    settings = settings_for(registry={"server": "registry.example.com", "username": "robot"})
    objects = stack_objects(settings, image=IMAGE, password="pw").in_apply_order()
    assert [o["kind"] for o in objects] == [
        "NetworkPolicy",
        "Secret",
        "PersistentVolumeClaim",
        "PyTorchJob",
    ]
    for manifest in objects:
        assert manifest["metadata"]["annotations"][FIELD_MANAGER_ANNOTATION] == FIELD_MANAGER


def test_checkpoint_claim() -> None:
    claim = checkpoint_claim_manifest(settings_for(checkpoints={"storageClass": "fast-rwx"}))
    assert claim["metadata"]["name"] == "pytorch-ddp-checkpoints"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": "10Ti"}},
        "storageClassName": "fast-rwx",
    }
    assert claim["metadata"]["annotations"] == {
        FIELD_MANAGER_ANNOTATION: FIELD_MANAGER,
        "pytorch-distributed/retain-on-destroy": "true",
    }
    plain = checkpoint_claim_manifest(settings_for(checkpoints={"retainOnDestroy": False}))
    assert plain["metadata"]["annotations"] == {FIELD_MANAGER_ANNOTATION: FIELD_MANAGER}
    assert "storageClassName" not in plain["spec"]
    assert common_labels(settings_for()).items() <= plain["metadata"]["labels"].items()


def test_registry_secret_with_plain_password() -> None:
    settings = settings_for(registry={"server": "registry.example.com", "username": "robot"})
    secret = registry_secret_manifest(settings, password="p@ss")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["metadata"]["name"] == "pytorch-ddp-registry"
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    entry = config["auths"]["registry.example.com"]
    assert entry["username"] == "robot" and entry["password"] == "p@ss"
    assert base64.b64decode(entry["auth"]).decode() == "robot:p@ss"
    assert config == docker_config("registry.example.com", "robot", "p@ss")


def test_docker_config_layout() -> None:
    """What the kubelet reads: `auths` by server, with `auth` = base64 of user:password."""
    assert docker_config("registry.example.com:5000", "robot", "p@ss") == {
        "auths": {
            "registry.example.com:5000": {
                "username": "robot",
                "password": "p@ss",
                "auth": base64.b64encode(b"robot:p@ss").decode(),
            }
        }
    }


def test_registry_secret_needs_a_registry() -> None:
    with pytest.raises(ValueError, match="registry"):
        registry_secret_manifest(settings_for(), password="x")


def test_registry_secret_with_secret_output_stays_secret() -> None:
    settings = settings_for(registry={"server": "registry.example.com", "username": "robot"})
    captured: dict[str, Any] = {}

    async def check() -> None:
        secret = registry_secret_manifest(settings, password=pulumi.Output.secret("p@ss"))
        data = secret["data"][".dockerconfigjson"]
        assert isinstance(data, pulumi.Output)
        captured["secret"] = await data.is_secret()
        captured["value"] = await data.future()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(check())
    finally:
        loop.close()
    assert captured["secret"] is True
    config = json.loads(base64.b64decode(captured["value"]))
    assert config["auths"]["registry.example.com"]["password"] == "p@ss"
    # The same layout as with a plain password: one builder serves both.
    assert config == docker_config("registry.example.com", "robot", "p@ss")


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stack_manifests_validate_against_kubernetes_schemas(repo_root: Path, stack: str) -> None:
    objects = stack_objects(
        load_stack_file(stack, repo_root), image=IMAGE, password="not-a-real-password"
    )
    for manifest in objects.in_apply_order():
        validate_manifest(manifest)


@pytest.mark.parametrize("stack", ["dev", "prod", "trainjob"])
def test_every_pod_of_every_stack_meets_restricted_without_a_token(
    repo_root: Path, stack: str
) -> None:
    objects = stack_objects(
        load_stack_file(stack, repo_root), image=IMAGE, password="not-a-real-password"
    )
    for manifest in (objects.job, objects.runtime):
        if manifest is not None:
            assert restricted_violations(manifest) == [], manifest["kind"]


def test_the_pods_run_as_the_trainer_images_user_unless_told_otherwise() -> None:
    for pod in pod_specs_of(settings_for()):
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": TRAINER_UID,
            "runAsGroup": TRAINER_GID,
            "fsGroup": TRAINER_GID,
            # Ownership of a large claim changes once, not at every start.
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert pod["automountServiceAccountToken"] is False
        [trainer] = pod["containers"]
        assert trainer["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    own = settings_for(job={"securityContext": {"runAsUser": 1000, "runAsGroup": 0, "fsGroup": 5}})
    for pod in pod_specs_of(own):
        context = pod["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (1000, 0, 5)
        assert context["runAsNonRoot"] is True


def test_root_only_when_the_stack_says_so_and_with_nothing_else_given_back() -> None:
    settings = settings_for(job={"runAsRoot": True})
    manifest = pytorchjob_manifest(settings, image=IMAGE)
    for pod in pod_specs_of(settings):
        assert pod["securityContext"]["runAsUser"] == 0
        assert pod["securityContext"]["runAsNonRoot"] is False
        # The claim keeps its group, so a later non-root run can write what root wrote.
        assert pod["securityContext"]["fsGroup"] == TRAINER_GID
        assert pod["containers"][0]["securityContext"] == container_security_context()
        assert pod["automountServiceAccountToken"] is False
    # Root, said outright, is all that sets it apart: the pack's root rule, not the others.
    assert restricted_violations(manifest) == []
    assert len(run_as_root(PYTORCHJOB_TYPE, manifest)) == 2
    assert pod_security_context(settings)["runAsUser"] == 0


def pod_specs_of(settings: StackSettings) -> list[dict[str, Any]]:
    manifest = pytorchjob_manifest(settings, image=IMAGE)
    return [spec["template"]["spec"] for spec in replicas(manifest).values()]


def test_schema_check_catches_mistakes() -> None:
    settings = settings_for()
    job = pytorchjob_manifest(settings, image=IMAGE)
    broken = copy.deepcopy(job)
    replicas(broken)["Master"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(broken)
    renamed = copy.deepcopy(job)
    container(renamed)["name"] = "trainer"
    replicas(renamed)["Master"]["replicas"] = 2
    replicas(renamed)["Launcher"] = replicas(renamed)["Worker"]
    problems = admission_violations(renamed)
    assert any("no container named 'pytorch'" in problem for problem in problems)
    assert any(
        "Master.replicas is 2; the operator requires exactly 1" in problem for problem in problems
    )
    assert any("Launcher" in problem for problem in problems)
    claim = checkpoint_claim_manifest(settings)
    claim["spec"]["accessMode"] = "ReadWriteMany"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(claim)


def test_stack_labels_mark_every_object_but_never_the_pods() -> None:
    """Pod labels live in the job's spec: changing them would replace a running job."""
    settings = parse_settings(
        {
            "image": {"repository": "registry.example.com/ml/trainer"},
            "registry": {"server": "registry.example.com", "username": "robot"},
            "labels": {"team": "vision"},
        },
        password="not-real",
    )
    job = pytorchjob_manifest(settings, image="registry.example.com/ml/trainer@sha256:" + "0" * 64)
    for manifest in (
        job,
        checkpoint_claim_manifest(settings),
        registry_secret_manifest(settings, password="not-real"),
    ):
        assert manifest["metadata"]["labels"]["team"] == "vision"
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        assert "team" not in spec["template"]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("pull_secret", "node"), [(None, None), ("run-a-registry", "node-7")], ids=["plain", "rwo"]
)
def test_checkpoint_reader_pod_mounts_the_claim_read_only(
    pull_secret: str | None, node: str | None
) -> None:
    settings = settings_for(job={"name": "run-a"}, checkpoints={"mountPath": "/ckpt"})
    pod = checkpoint_reader_pod_manifest(
        settings,
        name="run-a-checkpoint-reader-abc",
        image=IMAGE,
        pull_secret=pull_secret,
        node=node,
        deadline_seconds=600,
    )
    validate_manifest(pod)
    spec = pod["spec"]
    [volume] = spec["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": "run-a-checkpoints", "readOnly": True}
    [reader] = spec["containers"]
    assert reader["image"] == IMAGE
    assert reader["volumeMounts"] == [
        {"name": volume["name"], "mountPath": "/ckpt", "readOnly": True}
    ]
    # It only waits, and ends by itself even if the tool that started it is killed.
    assert reader["command"] == ["sleep", "600"]
    # `python3 -m trainer.checkpoint` through exec finds the trainer image's package.
    assert reader["env"] == [{"name": "PYTHONPATH", "value": "/opt/pytorch-distributed"}]
    assert spec["activeDeadlineSeconds"] == 600 and spec["restartPolicy"] == "Never"
    assert spec.get("imagePullSecrets") == ([{"name": pull_secret}] if pull_secret else None)
    if node is None:
        assert "affinity" not in spec
    else:
        [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"] == [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        ]
    labels = pod["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == "run-a"
    assert labels["app.kubernetes.io/managed-by"] == READER_MANAGER  # never Pulumi's
    # The job's user and groups, restricted, no token: it reads what the job's pods wrote.
    assert spec["securityContext"] == pod_security_context(settings)
    assert reader["securityContext"] == container_security_context()
    assert spec["automountServiceAccountToken"] is False


def test_checkpoint_reader_pod_on_runai_goes_through_its_scheduler() -> None:
    settings = settings_for(platform="runai", runaiProject="team-a")
    pod = checkpoint_reader_pod_manifest(
        settings, name="r", image=IMAGE, pull_secret=None, node=None, deadline_seconds=60
    )
    assert pod["spec"]["schedulerName"] == "runai-scheduler"
    assert pod["metadata"]["namespace"] == "runai-team-a"
    assert pod["metadata"]["labels"]["runai/queue"] == "team-a"


def test_job_parallelism_allows_exactly_the_trainers_choices() -> None:
    assert get_args(Parallelism) == PARALLELISMS
    assert "--parallelism" not in trainer_args(settings_for())  # ddp: the trainer's default
    with pytest.raises(Exception, match="parallelism"):
        settings_for(job={"parallelism": "zero3"})


def test_every_setting_reaches_the_trainer_field_its_argument_declares(tmp_path: Path) -> None:
    """Each TRAINER_ARGUMENTS entry, held to the trainer's own parser: the pods' args, parsed
    by trainer/cli.py as the trainer parses them, set each declared field to the setting's
    value (every argument present, none at the trainer's default). An s3 stack's own (the
    bucket's creation, which no claim stack has) in the next test."""
    (tmp_path / "earlier-run").mkdir()
    settings = settings_for(
        checkpoints={"mountPath": str(tmp_path)},
        job={
            "name": "run-b",
            "nodes": 3,
            "gpusPerNode": 2,
            "batchSize": 5,
            "totalEpochs": 7,
            "saveEvery": 3,
            "datasetSize": 999,
            "task": "tests.trainer.tasks:failing_on_rank_1",
            "initFrom": str(tmp_path / "earlier-run"),
            "saveEverySteps": 11,
            "parallelism": "fsdp",
            "elastic": {"minNodes": 1},
        },
    )
    args = trainer_args(settings)
    config = parse_config(args[args.index("--") + 1 :])
    defaults = parse_config(["1", "1"])
    for argument in TRAINER_ARGUMENTS:
        if argument.field in S3_ONLY_FIELDS:
            continue
        value = argument.value(settings)
        assert value is not None, argument.field
        assert getattr(config, argument.field) == value, argument.field
        assert getattr(defaults, argument.field) != value, argument.field
    assert trainer_argument("init_from") is not None
    assert trainer_argument("init_from").setting == "job.initFrom"  # type: ignore[union-attr]
    assert trainer_argument("seed") is None  # the trainer's own, no stack setting carries it


# The arguments only an s3 stack gives the trainer.
S3_ONLY_FIELDS = ("create_bucket",)


def test_an_s3_stacks_arguments_reach_the_trainer_fields_they_declare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's s3:// URL and the bucket's creation (a switch), parsed by trainer/cli.py; the
    bucket is not asked (its answer is the trainer's business at the pod's start)."""
    monkeypatch.setattr(S3Storage, "unusable", lambda self: None)
    settings = settings_for(
        checkpoints={"storage": "s3", "bucket": "team-ckpt", "createBucket": True},
        job={"name": "run-s3"},
    )
    args = trainer_args(settings)
    config = parse_config(args[args.index("--") + 1 :])
    defaults = parse_config(["1", "1"])
    assert config.checkpoint_dir == "s3://team-ckpt/run-s3" == settings.checkpoint_dir
    for field in S3_ONLY_FIELDS:
        argument = trainer_argument(field)
        assert argument is not None and argument.switch, field
        assert getattr(config, field) is True and getattr(defaults, field) is False, field
    assert trainer_argument("create_bucket").setting == "checkpoints.createBucket"  # type: ignore[union-attr]
