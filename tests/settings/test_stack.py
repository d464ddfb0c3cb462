"""settings/stack.py: defaults, derived values, stack files and every refusal."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pulumi
import pytest

from settings.stack import (
    DEFAULT_BASE_IMAGE,
    PASSWORD_KEY,
    PROVIDER_NAMESPACES,
    REDACTED,
    TOP_LEVEL_KEYS,
    TRAINER_GID,
    TRAINER_UID,
    SettingsError,
    load_settings,
    load_stack_file,
    parse_settings,
    settings_table_markdown,
)
from tests.settings.config import MINIMAL, with_values


def test_defaults_match_the_tutorial_run() -> None:
    settings = parse_settings(MINIMAL)
    assert settings.platform == "kubeflow"
    assert settings.namespace == "default"
    assert settings.registry is None
    assert settings.image.build is True
    assert settings.image.base_image == DEFAULT_BASE_IMAGE == "nvcr.io/nvidia/pytorch:24.07-py3"
    assert settings.image.platform == "linux/amd64"
    checkpoints = settings.checkpoints
    assert (checkpoints.size, checkpoints.access_mode, checkpoints.mount_path) == (
        "10Ti",
        "ReadWriteMany",
        "/checkpoints",
    )
    assert checkpoints.retain_on_destroy is True
    job = settings.job
    assert (job.name, job.nodes, job.gpus_per_node) == ("pytorch-ddp", 2, 1)
    assert (job.batch_size, job.total_epochs, job.save_every) == (32, 100, 25)
    assert (job.dataset_size, job.max_restarts, job.backoff_limit) == (2048, 0, 3)
    assert (job.cpu, job.memory, job.wait_for, job.clean_pod_policy) == (
        "4",
        "16Gi",
        "created",
        "Running",
    )
    # ExitCode recreates a pod that exits 128+ without a count: a week's deadline bounds it.
    assert (job.restart_policy, job.active_deadline_seconds) == ("ExitCode", 7 * 24 * 3600)
    assert job.ttl_seconds_after_finished is None


def test_derived_values() -> None:
    settings = parse_settings(with_values(job={"nodes": 4, "gpusPerNode": 8, "name": "big"}))
    assert settings.job.workers == 3
    assert settings.job.nproc_per_node == 8
    assert settings.checkpoint_dir == "/checkpoints/big"
    cpu = parse_settings(with_values(job={"gpusPerNode": 0}))
    assert cpu.job.nproc_per_node == 1


def test_settings_are_frozen() -> None:
    settings = parse_settings(MINIMAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.job.nodes = 3  # type: ignore[misc]


def test_runai_defaults_namespace_from_project() -> None:
    settings = parse_settings(with_values(platform="runai", runaiProject="team-a"))
    assert settings.namespace == "runai-team-a"
    explicit = parse_settings(with_values(platform="runai", runaiProject="team-a", namespace="ml"))
    assert explicit.namespace == "ml"


def test_string_spellings_from_config_set_path_are_accepted() -> None:
    settings = parse_settings(
        with_values(
            job={"nodes": "3", "gpusPerNode": "0"}, checkpoints={"retainOnDestroy": "false"}
        )
    )
    assert settings.job.nodes == 3 and settings.job.gpus_per_node == 0
    assert settings.checkpoints.retain_on_destroy is False


@pytest.mark.parametrize(
    ("repository", "insecure"),
    [
        ("localhost:5001/trainer", True),
        ("localhost/trainer", True),
        ("127.0.0.1:5000/team/trainer", True),
        ("127.10.0.3/trainer", True),
        ("registry.example.com/trainer", False),
        ("localhost.example.com:5000/trainer", False),
        ("127.0.0.1.example.com/trainer", False),
        ("team/trainer", False),
    ],
)
def test_a_registry_on_loopback_is_reached_over_plain_http_by_default(
    repository: str, insecure: bool
) -> None:
    settings = parse_settings({"image": {"repository": repository}})
    assert settings.image.insecure_registry is insecure
    assert settings.image.builder == "buildkit"
    chosen = parse_settings({"image": {"repository": repository, "insecureRegistry": not insecure}})
    assert chosen.image.insecure_registry is not insecure


def test_prebuilt_image_reference() -> None:
    digest = "registry.example.com/ml/trainer@sha256:" + "a" * 64
    pinned = parse_settings({"image": {"build": False, "ref": digest}})
    assert pinned.image.ref == digest and pinned.image.pinned
    tagged = parse_settings({"image": {"build": False, "ref": "registry.example.com/t:1.0"}})
    assert not tagged.image.pinned


def test_registry_and_password() -> None:
    settings = parse_settings(
        with_values(registry={"server": "registry.example.com", "username": "robot"}),
        password="s3cret",
    )
    assert settings.registry is not None
    assert (settings.registry.server, settings.registry.username) == (
        "registry.example.com",
        "robot",
    )
    assert settings.registry.password == "s3cret"


BAD_CASES: list[tuple[str, dict[str, Any], Any, str]] = [
    # (id, values, password, key the message must name)
    ("unknown-platform", with_values(platform="slurm"), None, "platform"),
    ("runai-without-project", with_values(platform="runai"), None, "runaiProject"),
    ("project-on-kubeflow", with_values(runaiProject="team-a"), None, "runaiProject"),
    ("bad-namespace", with_values(namespace="My_NS"), None, "namespace"),
    ("unknown-top-key", with_values(plataform="runai"), None, "plataform"),
    ("typo-in-job", with_values(job={"epochs": 10}), None, "job.epochs"),
    ("nodes-zero", with_values(job={"nodes": 0}), None, "job.nodes"),
    ("nodes-not-int", with_values(job={"nodes": "two"}), None, "job.nodes"),
    ("nodes-float", with_values(job={"nodes": 2.5}), None, "job.nodes"),
    ("nodes-bool", with_values(job={"nodes": True}), None, "job.nodes"),
    ("gpus-negative", with_values(job={"gpusPerNode": -1}), None, "job.gpusPerNode"),
    ("batch-zero", with_values(job={"batchSize": 0}), None, "job.batchSize"),
    ("bad-job-name", with_values(job={"name": "DDP_Run"}), None, "job.name"),
    ("job-name-digit", with_values(job={"name": "1run"}), None, "job.name"),
    ("job-name-long", with_values(job={"name": "a" * 49}), None, "job.name"),
    ("bad-wait", with_values(job={"waitFor": "done"}), None, "job.waitFor"),
    ("bad-clean", with_values(job={"cleanPodPolicy": "all"}), None, "job.cleanPodPolicy"),
    ("bad-restart", with_values(job={"restartPolicy": "Always"}), None, "job.restartPolicy"),
    (
        "zero-deadline",
        with_values(job={"activeDeadlineSeconds": 0}),
        None,
        "job.activeDeadlineSeconds",
    ),
    ("bad-cpu", with_values(job={"cpu": "4 cores"}), None, "job.cpu"),
    ("zero-memory", with_values(job={"memory": "0Gi"}), None, "job.memory"),
    (
        "negative-ttl",
        with_values(job={"ttlSecondsAfterFinished": -1}),
        None,
        "job.ttlSecondsAfterFinished",
    ),
    ("bad-task", with_values(job={"task": "trainer.tasks"}), None, "job.task"),
    ("init-off-claim", with_values(job={"initFrom": "/tmp/old"}), None, "job.initFrom"),
    ("init-dotdot", with_values(job={"initFrom": "/checkpoints/../etc"}), None, "job.initFrom"),
    (
        "init-own-dir",
        with_values(job={"name": "ddp", "initFrom": "/checkpoints/ddp"}),
        None,
        "job.initFrom",
    ),
    ("size-tb", with_values(checkpoints={"size": "10TB"}), None, "checkpoints.size"),
    ("bad-access", with_values(checkpoints={"accessMode": "RWX"}), None, "checkpoints.accessMode"),
    (
        "rwop-many",
        with_values(checkpoints={"accessMode": "ReadWriteOncePod"}),
        None,
        "checkpoints.accessMode",
    ),
    (
        "relative-mount",
        with_values(checkpoints={"mountPath": "checkpoints"}),
        None,
        "checkpoints.mountPath",
    ),
    (
        "shm-mount",
        with_values(checkpoints={"mountPath": "/dev/shm"}),
        None,
        "checkpoints.mountPath",
    ),
    (
        "retain-string",
        with_values(checkpoints={"retainOnDestroy": "yes"}),
        None,
        "checkpoints.retainOnDestroy",
    ),
    (
        "bad-claim",
        with_values(checkpoints={"existingClaim": "My Claim"}),
        None,
        "checkpoints.existingClaim",
    ),
    (
        "bad-storage-class",
        with_values(checkpoints={"storageClass": "Fast_SSD"}),
        None,
        "checkpoints.storageClass",
    ),
    ("checkpoints-not-object", with_values(checkpoints="10Ti"), None, "checkpoints"),
    (
        "root-user",
        with_values(job={"securityContext": {"runAsUser": 0}}),
        None,
        "job.securityContext.runAsUser",
    ),
    (
        "user-not-numeric",
        with_values(job={"securityContext": {"runAsUser": "trainer"}}),
        None,
        "job.securityContext.runAsUser",
    ),
    (
        "negative-group",
        with_values(job={"securityContext": {"runAsGroup": -1}}),
        None,
        "job.securityContext.runAsGroup",
    ),
    (
        "fs-group-too-large",
        with_values(job={"securityContext": {"fsGroup": 2**31}}),
        None,
        "job.securityContext.fsGroup",
    ),
    (
        "typo-in-security-context",
        with_values(job={"securityContext": {"runAsUid": 5}}),
        None,
        "job.securityContext.runAsUid",
    ),
    (
        "root-and-a-user",
        with_values(job={"runAsRoot": True, "securityContext": {"runAsUser": 1000}}),
        None,
        "job.securityContext.runAsUser",
    ),
    ("run-as-root-yes", with_values(job={"runAsRoot": "yes"}), None, "job.runAsRoot"),
    ("build-without-repository", {"image": {"build": True}}, None, "image.repository"),
    ("no-build-without-ref", {"image": {"build": False}}, None, "image.ref"),
    ("ref-while-building", with_values(image={"ref": "x/y:1"}), None, "image.ref"),
    (
        "repository-with-uppercase",
        {"image": {"repository": "Registry/Trainer"}},
        None,
        "image.repository",
    ),
    ("bad-image-platform", with_values(image={"platform": "linux/386"}), None, "image.platform"),
    ("bad-builder", with_values(image={"builder": "v1"}), None, "image.builder"),
    (
        "insecure-registry-yes",
        with_values(image={"insecureRegistry": "yes"}),
        None,
        "image.insecureRegistry",
    ),
    (
        "bad-base-image",
        with_values(image={"baseImage": "nvcr.io/NVIDIA pytorch"}),
        None,
        "image.baseImage",
    ),
    ("password-without-registry", MINIMAL, "pw", "registryPassword"),
    (
        "registry-without-username",
        with_values(registry={"server": "registry.example.com"}),
        None,
        "registry.username",
    ),
    (
        "registry-other-host",
        with_values(registry={"server": "other.example.com", "username": "u"}),
        None,
        "registry.server",
    ),
    (
        "typo-in-registry",
        with_values(registry={"server": "registry.example.com", "user": "u"}),
        None,
        "registry.user",
    ),
    # Issue 30: your own code, data and cluster.
    ("command-a-string", with_values(job={"command": "train.py --epochs 3"}), None, "job.command"),
    ("command-empty", with_values(job={"command": []}), None, "job.command"),
    ("command-with-an-object", with_values(job={"command": [{"a": 1}]}), None, "job.command"),
    (
        "trainer-key-beside-a-command",
        with_values(job={"command": ["train.py"], "totalEpochs": 3}),
        None,
        "job.totalEpochs",
    ),
    (
        "task-beside-a-command",
        with_values(job={"command": ["t.py"], "task": "a:b"}),
        None,
        "job.task",
    ),
    ("launcher-none-without-command", with_values(job={"launcher": "none"}), None, "job.launcher"),
    (
        "bad-launcher",
        with_values(job={"command": ["a"], "launcher": "mpirun"}),
        None,
        "job.launcher",
    ),
    ("env-not-an-object", with_values(job={"env": ["A=1"]}), None, "job.env"),
    ("env-bad-name", with_values(job={"env": {"1ST": "x"}}), None, "job.env.1ST"),
    (
        "env-reserved-name",
        with_values(job={"env": {"CHECKPOINT_DIR": "/x"}}),
        None,
        "job.env.CHECKPOINT_DIR",
    ),
    (
        "env-operator-name",
        with_values(job={"env": {"PET_NNODES": "3"}}),
        None,
        "job.env.PET_NNODES",
    ),
    ("env-object-value", with_values(job={"env": {"A": {"b": 1}}}), None, "job.env.A"),
    (
        "secret-env-plain",
        with_values(job={"secretEnv": {"HF_TOKEN": "hf_x"}}),
        None,
        "job.secretEnv.HF_TOKEN",
    ),
    (
        "secret-env-also-plain",
        with_values(job={"env": {"HF_TOKEN": "x"}, "secretEnv": {"HF_TOKEN": REDACTED}}),
        None,
        "job.secretEnv.HF_TOKEN",
    ),
    ("volumes-an-object", with_values(job={"volumes": {"claim": "data"}}), None, "job.volumes"),
    ("volume-a-string", with_values(job={"volumes": ["data"]}), None, "job.volumes[0]"),
    (
        "volume-without-path",
        with_values(job={"volumes": [{"claim": "data"}]}),
        None,
        "job.volumes[0].mountPath",
    ),
    (
        "volume-bad-claim",
        with_values(job={"volumes": [{"claim": "Data", "mountPath": "/d"}]}),
        None,
        "job.volumes[0].claim",
    ),
    (
        "volume-under-checkpoints",
        with_values(job={"volumes": [{"claim": "data", "mountPath": "/checkpoints/data"}]}),
        None,
        "job.volumes[0].mountPath",
    ),
    (
        "volume-over-checkpoints",
        with_values(
            job={"volumes": [{"claim": "data", "mountPath": "/mnt"}]},
            checkpoints={"mountPath": "/mnt/checkpoints"},
        ),
        None,
        "job.volumes[0].mountPath",
    ),
    (
        "volume-is-the-checkpoint-claim",
        with_values(job={"volumes": [{"claim": "pytorch-ddp-checkpoints", "mountPath": "/d"}]}),
        None,
        "job.volumes[0].claim",
    ),
    (
        "volume-on-shm",
        with_values(job={"volumes": [{"claim": "d", "mountPath": "/dev/shm"}]}),
        None,
        "job.volumes[0].mountPath",
    ),
    (
        "volume-on-dev",
        with_values(job={"volumes": [{"claim": "d", "mountPath": "/dev"}]}),
        None,
        "job.volumes[0].mountPath",
    ),
    (
        "volume-over-the-code",
        with_values(job={"volumes": [{"claim": "d", "mountPath": "/opt"}]}),
        None,
        "job.volumes[0].mountPath",
    ),
    (
        "volume-in-the-code",
        with_values(
            job={"volumes": [{"claim": "d", "mountPath": "/opt/pytorch-distributed/data"}]}
        ),
        None,
        "job.volumes[0].mountPath",
    ),
    (
        "two-volumes-one-path",
        with_values(
            job={
                "volumes": [
                    {"claim": "a", "mountPath": "/data"},
                    {"claim": "b", "mountPath": "/data"},
                ]
            }
        ),
        None,
        "job.volumes[1].mountPath",
    ),
    (
        "volume-read-only-yes",
        with_values(job={"volumes": [{"claim": "d", "mountPath": "/d", "readOnly": "yes"}]}),
        None,
        "job.volumes[0].readOnly",
    ),
    (
        "toleration-without-key",
        with_values(job={"tolerations": [{"effect": "NoSchedule"}]}),
        None,
        "job.tolerations[0].key",
    ),
    (
        "toleration-bad-operator",
        with_values(job={"tolerations": [{"key": "gpu", "operator": "In"}]}),
        None,
        "job.tolerations[0].operator",
    ),
    (
        "toleration-exists-with-value",
        with_values(job={"tolerations": [{"key": "gpu", "operator": "Exists", "value": "a"}]}),
        None,
        "job.tolerations[0].value",
    ),
    (
        "toleration-bad-effect",
        with_values(job={"tolerations": [{"key": "gpu", "effect": "NoRun"}]}),
        None,
        "job.tolerations[0].effect",
    ),
    (
        "toleration-seconds-without-no-execute",
        with_values(
            job={"tolerations": [{"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 60}]}
        ),
        None,
        "job.tolerations[0].tolerationSeconds",
    ),
    (
        "toleration-typo",
        with_values(job={"tolerations": [{"key": "gpu", "efect": "NoSchedule"}]}),
        None,
        "job.tolerations[0].efect",
    ),
    (
        "tolerations-an-object",
        with_values(job={"tolerations": {"key": "gpu"}}),
        None,
        "job.tolerations",
    ),
    (
        "node-selector-bad-name",
        with_values(job={"nodeSelector": {"gpu type": "a100"}}),
        None,
        "job.nodeSelector.gpu type",
    ),
    (
        "node-selector-bad-value",
        with_values(job={"nodeSelector": {"gpu": "a 100"}}),
        None,
        "job.nodeSelector.gpu",
    ),
    (
        "bad-priority-class",
        with_values(job={"priorityClassName": "High"}),
        None,
        "job.priorityClassName",
    ),
    (
        "priority-class-on-the-clusters-runtime",
        with_values(
            job={
                "api": "trainjob",
                "clusterRuntime": "torch-distributed",
                "priorityClassName": "high",
            }
        ),
        None,
        "job.priorityClassName",
    ),
    ("queue-not-a-name", with_values(job={"queue": "Team A"}), None, "job.queue"),
    ("queue-too-long", with_values(job={"queue": "q" * 64}), None, "job.queue"),
    (
        "queue-on-runai",
        with_values(platform="runai", runaiProject="team-a", job={"queue": "team-a"}),
        None,
        "job.queue",
    ),
    (
        "kueue-priority-without-a-queue",
        with_values(job={"priorityClass": "high"}),
        None,
        "job.priorityClass",
    ),
    (
        "kueue-priority-not-a-name",
        with_values(job={"priorityClass": "High!"}),
        None,
        "job.priorityClass",
    ),
    ("gpu-resource-no-vendor", with_values(job={"gpuResource": "gpu"}), None, "job.gpuResource"),
    (
        "gpu-resource-kubernetes",
        with_values(job={"gpuResource": "kubernetes.io/gpu"}),
        None,
        "job.gpuResource",
    ),
    (
        "gpu-resource-not-a-name",
        with_values(job={"gpuResource": "nvidia.com/"}),
        None,
        "job.gpuResource",
    ),
    ("context-absolute", with_values(image={"context": "/src/mine"}), None, "image.context"),
    ("context-outside", with_values(image={"context": "../mine"}), None, "image.context"),
    ("context-missing", with_values(image={"context": "no-such-directory"}), None, "image.context"),
    ("dockerfile-missing", with_values(image={"context": "components"}), None, "image.dockerfile"),
    (
        "build-arg-base-image",
        with_values(image={"buildArgs": {"BASE_IMAGE": "x"}}),
        None,
        "image.buildArgs.BASE_IMAGE",
    ),
    (
        "build-arg-bad-name",
        with_values(image={"buildArgs": {"PIP-INDEX": "x"}}),
        None,
        "image.buildArgs.PIP-INDEX",
    ),
]


@pytest.mark.parametrize(
    ("values", "password", "key"),
    [case[1:] for case in BAD_CASES],
    ids=[case[0] for case in BAD_CASES],
)
def test_invalid_values_name_the_key(values: dict[str, Any], password: Any, key: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(values, password=password)
    message = str(raised.value)
    # One line: which key, which value (absent for a missing key), then what is allowed.
    pattern = rf"(invalid|missing) config pytorch-distributed:{re.escape(key)}( = .+)?: \S.+"
    assert re.fullmatch(pattern, message), message


def test_error_names_the_offending_value() -> None:
    with pytest.raises(SettingsError, match=r"job\.nodes = 'two'"):
        parse_settings(with_values(job={"nodes": "two"}))
    with pytest.raises(SettingsError, match=r"checkpoints\.size = '10TB'.*Ti"):
        parse_settings(with_values(checkpoints={"size": "10TB"}))


def test_committed_stack_files_validate(repo_root: Path) -> None:
    dev = load_stack_file("dev", repo_root)
    assert dev.job.gpus_per_node == 0
    assert dev.checkpoints.retain_on_destroy is False
    assert dev.checkpoints.access_mode == "ReadWriteOnce"
    prod = load_stack_file("prod", repo_root)
    assert prod.platform == "runai" and prod.runai_project
    assert (prod.job.nodes, prod.job.gpus_per_node, prod.job.batch_size) == (2, 1, 32)
    assert (prod.job.total_epochs, prod.job.save_every) == (100, 25)
    assert (prod.checkpoints.size, prod.checkpoints.access_mode) == ("10Ti", "ReadWriteMany")
    assert prod.checkpoints.retain_on_destroy is True
    assert prod.registry is not None and prod.registry.password is None


def test_stack_file_secure_password_is_redacted(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(
        "config:\n"
        "  pulumi:disable-default-providers: [kubernetes]\n"
        "  pytorch-distributed:image: {repository: registry.example.com/t}\n"
        "  pytorch-distributed:registry: {server: registry.example.com, username: u}\n"
        "  pytorch-distributed:registryPassword:\n"
        "    secure: AAABAJ0xyz\n",
        encoding="utf-8",
    )
    settings = load_stack_file("s", tmp_path)
    assert settings.registry is not None and settings.registry.password == REDACTED


def test_stack_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"Pulumi\.missing\.yaml"):
        load_stack_file("missing", tmp_path)
    (tmp_path / "Pulumi.bad.yaml").write_text(
        "config:\n  pytorch-distributed:job: {nodes: 0}\n"
        "  pytorch-distributed:image: {repository: r.example.com/t}\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError, match=r"pytorch-distributed:job\.nodes"):
        load_stack_file("bad", tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "config:\n  pytorch-distributed:job: {nodes: 2\n",
            r"is not valid YAML \(line 3, column 1\)",
        ),
        ("- a list\n", "expected a mapping with a 'config' mapping in it"),
        ("config: [a, b]\n", "expected a mapping with a 'config' mapping in it"),
    ],
)
def test_a_stack_file_that_is_not_a_config_mapping_is_one_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(SettingsError, match=expected) as refused:
        load_stack_file("s", tmp_path)
    assert "\n" not in str(refused.value)


def test_an_unknown_stack_lists_the_stacks_there(tmp_path: Path, repo_root: Path) -> None:
    with pytest.raises(SettingsError) as unknown:
        load_stack_file("dve", repo_root)
    assert str(unknown.value) == (
        f"stack 'dve': no stack file {repo_root / 'Pulumi.dve.yaml'}; the stacks in {repo_root} "
        "are dev, digits, digits-local, local, prod, trainjob"
    )
    with pytest.raises(SettingsError, match=r"the stacks in .* are none \(no Pulumi\.<stack>"):
        load_stack_file("dev", tmp_path)


@pytest.mark.parametrize("namespace", ["pytorch_distributed", "pytorch-distrubuted", "pytorch"])
def test_keys_under_another_namespace_are_refused_naming_the_projects(
    tmp_path: Path, namespace: str
) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: r.example.com/t}\n"
        f"  {namespace}:job: {{totalEpochs: 3}}\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError) as refused:
        load_stack_file("s", tmp_path)
    message = str(refused.value)
    assert f"config key '{namespace}:job'" in message
    assert "this project's keys are pytorch-distributed:<key> (e.g. pytorch-distributed:job)" in (
        message
    )


def test_the_providers_namespaces_are_left_to_the_providers(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(
        "config:\n"
        "  pulumi:disable-default-providers: [kubernetes, docker]\n"
        "  kubernetes:context: kind-dev\n"
        "  docker:host: unix:///run/podman/podman.sock\n"
        "  pytorch-distributed:image: {repository: r.example.com/t}\n",
        encoding="utf-8",
    )
    assert load_stack_file("s", tmp_path).image.repository == "r.example.com/t"


def test_the_providers_namespaces_are_those_of_the_programs_providers(repo_root: Path) -> None:
    """A provider the components start using needs its namespace allowed, or its config would
    be refused; one they stop using must not keep a typo's door open."""
    imported = set()
    for module in (repo_root / "components").glob("*.py"):
        imported |= set(re.findall(r"^import pulumi_(\w+)", module.read_text(), re.MULTILINE))
    assert set(PROVIDER_NAMESPACES) == {"pulumi", *imported}


def test_saving_less_often_than_the_epoch_count_is_valid() -> None:
    """The trainer always saves the last epoch."""
    settings = parse_settings(with_values(job={"totalEpochs": 4, "saveEvery": 5}))
    assert (settings.job.total_epochs, settings.job.save_every) == (4, 5)


def test_the_cli_config_is_checked_for_other_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pulumi.RunError, match="config key 'pytorch_distributed:job'"):
        _load_with_cli_env(
            monkeypatch,
            {
                "pytorch-distributed:image": json.dumps({"repository": "r.example.com/t"}),
                "pytorch_distributed:job": json.dumps({"nodes": 3}),
            },
        )


def _load_with_cli_env(monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> Any:
    """load_settings as under `pulumi up`: the CLI hands config over in PULUMI_CONFIG."""
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(config))
    monkeypatch.delenv("PULUMI_CONFIG_SECRET_KEYS", raising=False)
    # A fresh context, so no config set by another test through set_all_config leaks in.
    return contextvars.Context().run(load_settings)


def test_load_settings_reads_the_cli_config(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _load_with_cli_env(
        monkeypatch,
        {
            "pulumi:disable-default-providers": '["kubernetes","docker"]',
            "pytorch-distributed:namespace": "ml",
            "pytorch-distributed:image": json.dumps({"repository": "r.example.com/t"}),
            "pytorch-distributed:job": json.dumps({"nodes": 3, "waitFor": "none"}),
        },
    )
    assert settings.namespace == "ml"
    assert (settings.job.nodes, settings.job.wait_for) == (3, "none")


def test_load_settings_turns_errors_into_one_run_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pulumi.RunError, match=r"pytorch-distributed:job\.epochs") as raised:
        _load_with_cli_env(
            monkeypatch,
            {
                "pytorch-distributed:image": json.dumps({"repository": "r.example.com/t"}),
                "pytorch-distributed:job": json.dumps({"epochs": 3}),
            },
        )
    assert raised.value.__suppress_context__
    with pytest.raises(pulumi.RunError, match=r"pytorch-distributed:image = 'r\.example"):
        _load_with_cli_env(monkeypatch, {"pytorch-distributed:image": "r.example.com/t"})


# -- one declaration per key: the docs' table (tests/test_docs.py), the unknown-key message, help -


def test_every_declared_key_has_a_default_allowed_words_and_help() -> None:
    rows = [row.split(" | ") for row in settings_table_markdown().splitlines()[2:]]
    keys = [row[0].strip("| `") for row in rows]
    assert len(keys) == len(set(keys))
    assert {key for key in keys if "." not in key} == {
        *(
            key
            for key in TOP_LEVEL_KEYS
            if key not in ("image", "registry", "checkpoints", "job", "network", "metrics")
        ),
        PASSWORD_KEY,
    }
    for key, (_, default, allowed, help_text) in zip(keys, rows, strict=True):
        assert default and allowed and help_text.strip(" |") not in ("", "None"), key


@pytest.mark.parametrize(
    ("section", "fields", "key", "named"),
    [
        ("job", {"gpus_per_node": 2}, "gpus_per_node", "gpusPerNode"),  # attribute, not key
        (
            "registry",  # the password is a top-level secret, never in the registry object
            {"server": "registry.example.com", "username": "u", "password": "x"},
            "password",
            "username",
        ),
        ("checkpoints", {"retain": False}, "retain", "retainOnDestroy"),
    ],
)
def test_unknown_keys_are_refused_naming_the_allowed_ones(
    section: str, fields: dict[str, Any], key: str, named: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(with_values(**{section: fields}))
    message = str(raised.value)
    assert message.startswith(f"invalid config pytorch-distributed:{section}.{key} = ")
    assert "unknown key; allowed keys are " in message and named in message


def test_null_means_the_default() -> None:
    settings = parse_settings(with_values(job={"nodes": None}, kubeContext=None))
    assert settings.job.nodes == 2 and settings.kube_context is None


def test_password_is_never_shown() -> None:
    settings = parse_settings(
        with_values(registry={"server": "registry.example.com", "username": "robot"}),
        password="s3cret",
    )
    assert "s3cret" not in repr(settings)


def test_replace_checks_each_value_but_leaves_rules_across_keys_to_the_caller() -> None:
    """tools/run_local.py overrides epochs with dataclasses.replace and words that rule itself."""
    job = parse_settings(MINIMAL).job
    assert dataclasses.replace(job, total_epochs=2).save_every == 25
    with pytest.raises(ValueError, match="nodes"):
        dataclasses.replace(job, nodes=0)


def test_the_pods_user_is_the_images_unless_set_and_root_only_when_said() -> None:
    job = parse_settings(MINIMAL).job
    assert (job.run_as_user, job.run_as_root) == (TRAINER_UID, False)
    assert (job.security_context.run_as_group, job.security_context.fs_group) == (
        TRAINER_GID,
        TRAINER_GID,
    )
    own = parse_settings(with_values(job={"securityContext": {"runAsUser": "1000"}})).job
    assert own.run_as_user == 1000
    assert parse_settings(with_values(job={"runAsRoot": "true"})).job.run_as_user == 0
    with pytest.raises(SettingsError, match=r"job\.securityContext\.runAsUser = 0: .*runAsRoot"):
        parse_settings(with_values(job={"securityContext": {"runAsUser": 0}}))


def test_the_trainer_images_user_is_the_default_one(repo_root: Path) -> None:
    """trainer/Dockerfile's numeric USER is what the pods run as by default."""
    dockerfile = (repo_root / "trainer" / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)\s*$", dockerfile, re.MULTILINE)
    assert users == [f"{TRAINER_UID}:{TRAINER_GID}"]
    assert f"useradd --uid {TRAINER_UID} --gid {TRAINER_GID} " in dockerfile
    assert f"groupadd --gid {TRAINER_GID} " in dockerfile


# -- your own code, data and cluster (issue 30) ---------------------------------------------------


def test_the_trainer_is_the_default_and_nothing_else_changes_by_default() -> None:
    settings = parse_settings(MINIMAL)
    image, job = settings.image, settings.job
    assert (image.context, image.dockerfile, dict(image.build_args)) == (
        "trainer",
        "trainer/Dockerfile",
        {},
    )
    assert image.trainer_context and job.runs_trainer
    assert image.build_arguments == {"BASE_IMAGE": DEFAULT_BASE_IMAGE}
    assert (job.command, job.launcher, dict(job.env), dict(job.secret_env)) == (
        None,
        "torchrun",
        {},
        {},
    )
    assert (job.volumes, dict(job.node_selector), job.tolerations) == ((), {}, ())
    assert (job.priority_class_name, job.gpu_resource) == (None, "nvidia.com/gpu")


def test_your_own_code_data_and_scheduling_are_read_as_kubernetes_has_them() -> None:
    settings = parse_settings(
        with_values(
            image={
                "context": "examples/digits/",
                "buildArgs": {"PIP_INDEX_URL": "https://pypi.example/simple", "N": 2},
            },
            job={
                # `pulumi config set --path job.command[2] 10` stores a number.
                "command": ["train.py", "--epochs", 10],
                "env": {"LOG_LEVEL": "debug", "WORKERS": 4, "DEBUG": False},
                "secretEnv": {"HF_TOKEN": REDACTED},
                "volumes": [{"claim": "digits-data", "mountPath": "/data"}],
                "nodeSelector": {"example.com/gpu-pool": "a100", "spot": False},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {
                        "key": "pool",
                        "value": "a100",
                        "effect": "NoExecute",
                        "tolerationSeconds": "60",
                    },
                ],
                "priorityClassName": "high",
                "gpuResource": "nvidia.com/mig-1g.10gb",
            },
        )
    )
    image, job = settings.image, settings.job
    assert (image.context, image.dockerfile) == ("examples/digits", "examples/digits/Dockerfile")
    assert not image.trainer_context and not job.runs_trainer
    assert image.build_arguments == {
        "BASE_IMAGE": DEFAULT_BASE_IMAGE,
        "PIP_INDEX_URL": "https://pypi.example/simple",
        "N": "2",
    }
    assert job.command == ("train.py", "--epochs", "10")
    assert job.env == {"LOG_LEVEL": "debug", "WORKERS": "4", "DEBUG": "false"}
    assert job.secret_env == {"HF_TOKEN": REDACTED}
    [volume] = job.volumes
    assert (volume.claim, volume.mount_path, volume.read_only) == ("digits-data", "/data", True)
    assert job.node_selector == {"example.com/gpu-pool": "a100", "spot": "false"}
    assert [toleration.manifest() for toleration in job.tolerations] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "pool",
            "operator": "Equal",
            "value": "a100",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
    ]
    assert (job.priority_class_name, job.gpu_resource) == ("high", "nvidia.com/mig-1g.10gb")


def test_a_toleration_of_every_taint_needs_no_key() -> None:
    job = parse_settings(with_values(job={"tolerations": [{"operator": "Exists"}]})).job
    assert [toleration.manifest() for toleration in job.tolerations] == [{"operator": "Exists"}]


def test_the_launcher_none_runs_the_command_as_it_is() -> None:
    job = parse_settings(with_values(job={"command": ["bash", "run.sh"], "launcher": "none"})).job
    assert (job.command, job.launcher) == (("bash", "run.sh"), "none")


def test_a_volume_may_sit_beside_the_checkpoints_and_be_writable() -> None:
    settings = parse_settings(
        with_values(
            job={
                "volumes": [
                    {"claim": "scratch", "mountPath": "/checkpoints-scratch", "readOnly": "false"}
                ]
            }
        )
    )
    assert settings.job.volumes[0].read_only is False


def in_a_loop_of_its_own(check: Any) -> Any:
    """Run the coroutine function `check` on a fresh event loop in a fresh context: the Outputs
    it makes are awaited there, so none is left in Pulumi's global set for a later program run
    (tests/pulumi_harness.py) to wait on."""

    def run() -> Any:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(check())
        finally:
            loop.close()

    return contextvars.Context().run(run)


def test_secret_env_values_are_never_shown() -> None:
    async def check() -> None:
        secret = pulumi.Output.secret("hf_never-shown")
        job = parse_settings(with_values(job={"secretEnv": {"HF_TOKEN": secret}})).job
        assert job.secret_env["HF_TOKEN"] is secret
        assert "secret_env" not in repr(job)
        assert await secret.future() == "hf_never-shown"

    in_a_loop_of_its_own(check)


def test_a_stack_files_secret_env_is_its_ciphertext_and_a_plain_one_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/t}\n"
        "  pytorch-distributed:job:\n"
        "    secretEnv:\n"
        "      HF_TOKEN:\n"
        "        secure: AAABAJ0xyz\n",
        encoding="utf-8",
    )
    settings = load_stack_file("s", tmp_path)
    assert settings.job.secret_env == {"HF_TOKEN": REDACTED}
    assert settings.stack_name == "s"
    (tmp_path / "Pulumi.plain.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/t}\n"
        "  pytorch-distributed:job: {secretEnv: {HF_TOKEN: hf_in-plain-text}}\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError) as refused:
        load_stack_file("plain", tmp_path)
    message = str(refused.value)
    assert message.startswith("invalid config pytorch-distributed:job.secretEnv.HF_TOKEN = ")
    assert "pulumi config set --secret --path job.secretEnv.HF_TOKEN" in message
    assert "hf_in-plain-text" not in message


def test_the_program_reads_secret_env_as_secrets_only_when_the_engine_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pulumi config set --secret --path job.secretEnv.X` makes the whole `job` key a secret
    one: the program then wraps each value; a job key that is not secret holds none."""
    config = {
        "pytorch-distributed:image": json.dumps({"repository": "r.example.com/t"}),
        "pytorch-distributed:job": json.dumps({"secretEnv": {"HF_TOKEN": "hf_decrypted"}}),
    }
    monkeypatch.setenv("PULUMI_CONFIG_SECRET_KEYS", json.dumps(["pytorch-distributed:job"]))

    def load() -> Any:
        import pulumi.runtime.config as runtime_config

        runtime_config.set_all_config(config, ["pytorch-distributed:job"])
        return load_settings()

    async def check() -> tuple[bool, str]:
        secret = load().job.secret_env["HF_TOKEN"]
        assert isinstance(secret, pulumi.Output)
        return await secret.is_secret(), await secret.future()

    assert in_a_loop_of_its_own(check) == (True, "hf_decrypted")
    with pytest.raises(pulumi.RunError, match=r"job\.secretEnv\.HF_TOKEN = '<redacted>'") as raised:
        _load_with_cli_env(monkeypatch, config)
    assert "hf_decrypted" not in str(raised.value)


def test_a_prebuilt_image_needs_no_trainer_directory_beside_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A program that pip-installed the components has no trainer/ beside them: a prebuilt image
    with the default context reads none; building, or a context of one's own, still does."""
    import settings.stack as settings_module

    monkeypatch.setattr(settings_module, "REPO_ROOT", tmp_path)
    prebuilt = {"build": False, "ref": "registry.example.com/ml/trainer:1"}
    assert parse_settings(with_values(image=prebuilt)).image.ref == prebuilt["ref"]
    for image in ({}, {**prebuilt, "context": "mine"}):
        with pytest.raises(SettingsError, match=r"image\.context = .*no such directory"):
            parse_settings(with_values(image=image))


# Issue 33: checkpoints in S3-compatible object storage.
S3: dict[str, Any] = {"storage": "s3", "bucket": "team-ckpt"}


def s3_values(job: dict[str, Any] | None = None, **checkpoints: Any) -> dict[str, Any]:
    return with_values(checkpoints={**S3, **checkpoints}, job=job or {})


def test_a_stack_keeps_its_checkpoints_on_a_claim_unless_told_otherwise() -> None:
    settings = parse_settings(MINIMAL)
    checkpoints = settings.checkpoints
    assert (checkpoints.storage, checkpoints.backend.name, checkpoints.bucket) == (
        "claim",
        "claim",
        None,
    )
    assert (checkpoints.region, checkpoints.create_bucket) == ("us-east-1", False)
    assert checkpoints.root == "/checkpoints"
    assert settings.checkpoint_dir == "/checkpoints/pytorch-ddp"
    assert settings.checkpoint_claim == "pytorch-ddp-checkpoints"
    assert checkpoints.client_environment == {} and settings.storage_env == {}


def test_an_s3_stacks_run_lives_under_its_bucket_and_prefix() -> None:
    settings = parse_settings(
        s3_values(job={"name": "run-s3"}, prefix="runs/team-a", endpoint="http://minio:9000")
    )
    assert settings.checkpoints.root == "s3://team-ckpt/runs/team-a"
    assert settings.checkpoint_dir == "s3://team-ckpt/runs/team-a/run-s3"
    assert settings.checkpoint_claim is None
    assert settings.checkpoints.client_environment == {
        "AWS_ENDPOINT_URL_S3": "http://minio:9000",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    assert settings.checkpoints.backend.credentials(settings.checkpoints) == {}
    # Without a prefix the run is at the bucket's top; without an endpoint, AWS.
    bare = parse_settings(s3_values(region="eu-west-3"))
    assert bare.checkpoint_dir == "s3://team-ckpt/pytorch-ddp"
    assert bare.checkpoints.client_environment == {"AWS_DEFAULT_REGION": "eu-west-3"}


def test_s3_credentials_are_secrets_never_shown() -> None:
    async def check() -> None:
        key_id, key = pulumi.Output.secret("AKIA-never-shown"), pulumi.Output.secret("never-shown")
        settings = parse_settings(s3_values(accessKeyId=key_id, secretAccessKey=key))
        checkpoints = settings.checkpoints
        assert (checkpoints.access_key_id, checkpoints.secret_access_key) == (key_id, key)
        assert checkpoints.backend.credentials(checkpoints) == {
            "AWS_ACCESS_KEY_ID": key_id,
            "AWS_SECRET_ACCESS_KEY": key,
        }
        assert "never-shown" not in repr(settings) and "access_key" not in repr(checkpoints)
        assert set(settings.storage_env) == {
            "AWS_DEFAULT_REGION",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        }
        await key_id.future(), await key.future()

    in_a_loop_of_its_own(check)


S3_REFUSALS = [
    (
        "s3-without-bucket",
        with_values(checkpoints={"storage": "s3"}),
        "missing config pytorch-distributed:checkpoints.bucket: required when "
        "checkpoints.storage is s3",
    ),
    (
        "unknown-storage",
        with_values(checkpoints={"storage": "nfs"}),
        "invalid config pytorch-distributed:checkpoints.storage = 'nfs': expected one of claim, s3",
    ),
    *[
        (
            f"{key}-with-a-claim",
            with_values(checkpoints={key: value}),
            f"invalid config pytorch-distributed:checkpoints.{key} = {shown!r}: "
            f"checkpoints.{key} is for checkpoints.storage: s3",
        )
        for key, value, shown in [
            ("bucket", "team-ckpt", "team-ckpt"),
            ("prefix", "runs", "runs"),
            ("endpoint", "https://minio.example.com", "https://minio.example.com"),
            ("region", "us-east-1", "us-east-1"),  # written, even if it is the default
            ("createBucket", False, False),
            ("accessKeyId", REDACTED, REDACTED),
            ("secretAccessKey", "plain-never-shown", REDACTED),
        ]
    ],
    *[
        (
            f"{key}-with-s3",
            s3_values(**{key: value}),
            f"invalid config pytorch-distributed:checkpoints.{key} = {value!r}: "
            f"checkpoints.{key} is for checkpoints.storage: claim, and with s3 there is no claim",
        )
        for key, value in [
            ("size", "1Ti"),
            ("storageClass", "fast"),
            ("accessMode", "ReadWriteMany"),  # written, even if it is the default
            ("mountPath", "/checkpoints"),
            ("retainOnDestroy", True),
            ("existingClaim", "shared"),
        ]
    ],
    (
        "only-the-key-id",
        s3_values(accessKeyId=REDACTED),
        "missing config pytorch-distributed:checkpoints.secretAccessKey: "
        "checkpoints.accessKeyId is set: the credentials go together, set both",
    ),
    (
        "only-the-secret-key",
        s3_values(secretAccessKey=REDACTED),
        "missing config pytorch-distributed:checkpoints.accessKeyId: "
        "checkpoints.secretAccessKey is set: the credentials go together, set both",
    ),
    (
        "plain-credentials",
        s3_values(accessKeyId="AKIAPLAINNEVERSHOWN1", secretAccessKey=REDACTED),
        "invalid config pytorch-distributed:checkpoints.accessKeyId = '<redacted>': expected a "
        "secret of the stack's config: pulumi config set --secret --path "
        "checkpoints.accessKeyId VALUE",
    ),
    (
        "endpoint-not-http",
        s3_values(endpoint="s3.example.com"),
        "invalid config pytorch-distributed:checkpoints.endpoint = 's3.example.com': expected "
        "the http:// or https:// URL",
    ),
    (
        "endpoint-with-credentials",
        s3_values(endpoint="https://user:pw@minio.example.com"),
        "invalid config pytorch-distributed:checkpoints.endpoint = ",
    ),
    *[
        (
            f"bucket-{name}",
            s3_values(bucket=bucket),
            f"invalid config pytorch-distributed:checkpoints.bucket = {bucket!r}: expected an S3 "
            "bucket name: 3-63 characters of lowercase letters, digits, '.' and '-', starting "
            "and ending with a letter or digit",
        )
        for name, bucket in [
            ("too-short", "ab"),
            ("too-long", "a" * 64),
            ("uppercase", "Team-ckpt"),
            ("underscore", "team_ckpt"),
            ("ending-in-a-hyphen", "team-"),
            ("starting-with-a-dot", ".team"),
        ]
    ],
    *[
        (
            f"prefix-{name}",
            s3_values(prefix=prefix),
            f"invalid config pytorch-distributed:checkpoints.prefix = {prefix!r}: expected a key "
            "prefix such as runs/team-a",
        )
        for name, prefix in [
            ("leading-slash", "/runs"),
            ("trailing-slash", "runs/"),
            ("double-slash", "runs//a"),
            ("dot-dot", "runs/../a"),
            ("space", "my runs"),
        ]
    ],
    (
        "region-uppercase",
        s3_values(region="US-EAST-1"),
        "invalid config pytorch-distributed:checkpoints.region = 'US-EAST-1': expected a region",
    ),
    (
        "create-bucket-with-own-code",
        s3_values(job={"command": ["train.py"]}, createBucket=True),
        "invalid config pytorch-distributed:checkpoints.createBucket = True: only the "
        "project's trainer creates the bucket",
    ),
    (
        "env-the-stack-sets",
        s3_values(job={"env": {"AWS_DEFAULT_REGION": "eu-west-1"}}),
        "invalid config pytorch-distributed:job.env.AWS_DEFAULT_REGION = 'eu-west-1': "
        "checkpoints.storage: s3 sets AWS_DEFAULT_REGION in the pods",
    ),
    (
        "secret-env-the-stack-sets",
        s3_values(
            job={"secretEnv": {"AWS_SECRET_ACCESS_KEY": REDACTED}},
            accessKeyId=REDACTED,
            secretAccessKey=REDACTED,
        ),
        "invalid config pytorch-distributed:job.secretEnv.AWS_SECRET_ACCESS_KEY = '<redacted>': "
        "checkpoints.storage: s3 sets AWS_SECRET_ACCESS_KEY",
    ),
    (
        "init-from-the-claim-on-s3",
        s3_values(job={"initFrom": "/checkpoints/old"}),
        "invalid config pytorch-distributed:job.initFrom = '/checkpoints/old': expected a "
        "checkpoint directory or file in the bucket, under s3://team-ckpt/",
    ),
    (
        "init-from-another-bucket",
        s3_values(job={"initFrom": "s3://other/old"}),
        "invalid config pytorch-distributed:job.initFrom = 's3://other/old': expected a "
        "checkpoint directory or file in the bucket, under s3://team-ckpt/",
    ),
    (
        "init-from-its-own-run-on-s3",
        s3_values(job={"initFrom": "s3://team-ckpt/pytorch-ddp/epoch-3"}),
        "invalid config pytorch-distributed:job.initFrom = 's3://team-ckpt/pytorch-ddp/epoch-3': "
        "this is the job's own checkpoint directory s3://team-ckpt/pytorch-ddp",
    ),
]


@pytest.mark.parametrize(
    ("values", "message"),
    [case[1:] for case in S3_REFUSALS],
    ids=[case[0] for case in S3_REFUSALS],
)
def test_s3_settings_are_refused_naming_the_key_and_what_is_allowed(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(values)
    assert str(raised.value).startswith(message), str(raised.value)
    assert "never-shown" not in str(raised.value).lower()


def test_an_s3_stack_may_warm_start_from_another_run_in_its_bucket_and_keep_its_env() -> None:
    settings = parse_settings(
        s3_values(
            job={"initFrom": "s3://team-ckpt/runs/old/epoch-3", "env": {"AWS_MAX_ATTEMPTS": "5"}},
            prefix="runs",
        )
    )
    assert settings.job.init_from == "s3://team-ckpt/runs/old/epoch-3"
    # A claim stack's job may set the variables an s3 stack sets itself: nothing sets them.
    claim = parse_settings(with_values(job={"env": {"AWS_DEFAULT_REGION": "eu-west-1"}}))
    assert claim.job.env == {"AWS_DEFAULT_REGION": "eu-west-1"}


def test_a_stack_files_s3_credentials_are_their_ciphertext(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.s3.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/t}\n"
        "  pytorch-distributed:checkpoints:\n"
        "    storage: s3\n"
        "    bucket: team-ckpt\n"
        "    accessKeyId:\n"
        "      secure: AAABAKeyId\n"
        "    secretAccessKey:\n"
        "      secure: AAABASecret\n",
        encoding="utf-8",
    )
    checkpoints = load_stack_file("s3", tmp_path).checkpoints
    assert (checkpoints.access_key_id, checkpoints.secret_access_key) == (REDACTED, REDACTED)
    (tmp_path / "Pulumi.plain.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/t}\n"
        "  pytorch-distributed:checkpoints:\n"
        "    {storage: s3, bucket: b-1, accessKeyId: AKIAPLAIN, secretAccessKey: plain-secret}\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError) as refused:
        load_stack_file("plain", tmp_path)
    assert "checkpoints.accessKeyId = '<redacted>'" in str(refused.value)
    assert "AKIAPLAIN" not in str(refused.value) and "plain-secret" not in str(refused.value)


def test_the_program_reads_s3_credentials_as_secrets_only_when_the_engine_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pulumi config set --secret --path checkpoints.accessKeyId` makes the whole `checkpoints`
    key a secret one: the program then wraps each credential; plain ones are refused."""
    checkpoints = {**S3, "accessKeyId": "AKIADECRYPTED", "secretAccessKey": "decrypted"}
    config = {
        "pytorch-distributed:image": json.dumps({"repository": "r.example.com/t"}),
        "pytorch-distributed:checkpoints": json.dumps(checkpoints),
    }

    def load() -> Any:
        import pulumi.runtime.config as runtime_config

        runtime_config.set_all_config(config, ["pytorch-distributed:checkpoints"])
        return load_settings()

    async def check() -> list[tuple[bool, str]]:
        settings = load().checkpoints
        assert settings.bucket == "team-ckpt"  # the other keys stay plain values
        secrets = [settings.access_key_id, settings.secret_access_key]
        assert all(isinstance(secret, pulumi.Output) for secret in secrets)
        return [(await secret.is_secret(), await secret.future()) for secret in secrets]

    assert in_a_loop_of_its_own(check) == [(True, "AKIADECRYPTED"), (True, "decrypted")]
    with pytest.raises(pulumi.RunError, match=r"checkpoints\.accessKeyId = '<redacted>'") as raised:
        _load_with_cli_env(monkeypatch, config)
    assert "DECRYPTED" not in str(raised.value).upper()
