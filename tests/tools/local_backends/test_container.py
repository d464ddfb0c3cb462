"""tools/local_backends/container.py: what a container of a pod gets of its securityContext (the
user, the groups, no new privileges, no capabilities), and the checkpoint root given to the pods'
fsGroup as the kubelet gives them a claim. Running the containers is tests/image's."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from builders.job_apis import api_of_settings
from settings.stack import TRAINER_GID, TRAINER_UID, load_stack_file
from tests.conftest import REPO_ROOT
from tools.local_backends import ReplicaPlan, container
from tools.local_backends.container import (
    ContainerBackendError,
    fs_group,
    give_to_fs_group,
    identity_options,
)

GROUP_ALL = stat.S_ISGID | stat.S_IRWXG


def argv_of(stack: str, tmp_path: Path, **job: object) -> list[list[str]]:
    settings = load_stack_file(stack, REPO_ROOT)
    settings = dataclasses.replace(settings, job=dataclasses.replace(settings.job, **job))
    api = api_of_settings(settings)
    manifest, runtime = api.job_manifest(settings, image="img"), api.runtime_manifest(settings)
    commands, _ = container.replica_commands(
        manifest,
        ReplicaPlan("default", tmp_path, 4321, runtime),
        engine=container.Engine("podman"),
        image="img",
        run="r",
        workdir=tmp_path,
    )
    return [command.argv for command in commands]


def option(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == name]


@pytest.mark.parametrize("stack", ["dev", "trainjob"])
def test_each_container_runs_as_the_pods_user_without_privileges(
    stack: str, tmp_path: Path
) -> None:
    for argv in argv_of(stack, tmp_path):
        assert option(argv, "--user") == [f"{TRAINER_UID}:{TRAINER_GID}"]
        assert option(argv, "--group-add") == [str(TRAINER_GID)]
        assert option(argv, "--security-opt") == ["no-new-privileges"]
        assert option(argv, "--cap-drop") == ["ALL"]
        assert argv.index("--user") < argv.index("img")  # an engine option, not the command's


def test_root_is_root_in_the_container_too(tmp_path: Path) -> None:
    for argv in argv_of("dev", tmp_path, run_as_root=True):
        assert option(argv, "--user") == [f"0:{TRAINER_GID}"]
        assert option(argv, "--cap-drop") == ["ALL"]


def test_rootless_the_pods_user_is_this_users_own_ids() -> None:
    """Rootless podman: the pod's user and group map to this user, who owns the checkpoint root
    (and so no group needs to be given it)."""
    template = {"spec": {"securityContext": {"runAsUser": 5, "runAsGroup": 6, "fsGroup": 6}}}
    assert identity_options(template, {}, rootless=True)[:4] == [
        "--userns",
        "keep-id:uid=5,gid=6",
        "--user",
        "5:6",
    ]
    assert "--userns" not in identity_options(template, {})
    assert container.Engine("podman").rootless is (os.geteuid() != 0)
    assert container.Engine("docker").rootless is False


def test_a_containers_own_user_wins_over_the_pods() -> None:
    template = {"spec": {"securityContext": {"runAsUser": 5, "runAsGroup": 6}}}
    assert identity_options(template, {"securityContext": {"runAsUser": 7}}) == ["--user", "7:6"]
    assert identity_options({"spec": {}}, {}) == []  # the image's own user, as on a node


def test_the_pods_fs_group_is_found_for_either_job_api() -> None:
    for stack in ("dev", "trainjob"):
        settings = load_stack_file(stack, REPO_ROOT)
        api = api_of_settings(settings)
        job = api.job_manifest(settings, image="img")
        assert fs_group(job, api.runtime_manifest(settings)) == TRAINER_GID


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another group needs root")
def test_the_checkpoint_root_is_given_to_the_fs_group_once(tmp_path: Path) -> None:
    root = tmp_path / "claim"
    (root / "ddp-dev").mkdir(parents=True)
    (root / "ddp-dev" / "manifest.json").write_text("{}")
    (root / "ddp-dev" / "manifest.json").chmod(0o644)
    give_to_fs_group(root, TRAINER_GID)
    for path in (root, root / "ddp-dev"):
        assert path.stat().st_gid == TRAINER_GID
        assert path.stat().st_mode & GROUP_ALL == GROUP_ALL
    written = root / "ddp-dev" / "manifest.json"
    assert written.stat().st_gid == TRAINER_GID
    assert stat.S_IMODE(written.stat().st_mode) == 0o664
    # OnRootMismatch: a root that is already the group's is not walked again.
    written.chmod(0o600)
    give_to_fs_group(root, TRAINER_GID)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


def test_a_root_this_user_may_not_give_away_is_one_line_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path, uid: int, gid: int) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(os, "chown", refuse)
    with pytest.raises(ContainerBackendError) as raised:
        give_to_fs_group(tmp_path, 4242)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"--checkpoint-root = '{tmp_path}': the pods' fsGroup 4242")
    assert f"chgrp -R 4242 '{tmp_path}' && chmod -R g+rwX '{tmp_path}'" in message


def test_data_claims_are_bound_read_only_and_secrets_passed_by_name_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from settings.stack import REDACTED

    monkeypatch.setenv("HF_TOKEN", "hf_never-on-a-command-line")
    settings = load_stack_file("digits", REPO_ROOT)
    job = dataclasses.replace(settings.job, gpus_per_node=0, secret_env={"HF_TOKEN": REDACTED})
    settings = dataclasses.replace(settings, job=job)
    manifest = api_of_settings(settings).job_manifest(settings, image="img")
    commands, notices = container.replica_commands(
        manifest,
        ReplicaPlan(
            "default", tmp_path / "claim", 4321, data_dirs={"digits-data": tmp_path / "data"}
        ),
        engine=container.Engine("podman"),
        image="img",
        run="r",
        workdir=tmp_path,
    )
    assert notices == []
    for command in commands:
        argv = list(command.argv)
        assert option(argv, "--volume") == [
            f"{tmp_path / 'claim'}:/checkpoints",
            f"{tmp_path / 'data'}:/data:ro",
        ]
        envs = option(argv, "--env")
        assert "HF_TOKEN" in envs  # the engine gives it the value of its own environment
        assert not any("hf_never-on-a-command-line" in word for word in argv)
        assert "CHECKPOINT_DIR=/checkpoints/digits" in envs
        assert "--workdir" not in argv  # the image's WORKDIR
        entrypoint = argv.index("--entrypoint")
        assert argv[entrypoint + 1 :] == [
            "torchrun",
            "img",
            "--max-restarts",
            "0",
            "train.py",
            "--epochs",
            "30",
        ]
