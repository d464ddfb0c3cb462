"""tools/local_backends/process.py: the job's replicas as local processes (their commands and
environment, with the rendezvous on loopback) and the devices they get."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from builders.job_apis.pytorchjob import pytorchjob_manifest
from settings.stack import ElasticSettings, StackSettings, load_stack_file
from tests.conftest import REPO_ROOT
from tests.tools.conftest import overrides
from tools.local_backends import ReplicaPlan
from tools.local_backends.process import choose_devices, replica_commands
from tools.run_local import apply_overrides
from tools.supervisor import ReplicaCommand

JOB = "ddp-dev"  # job.name of the dev stack
MASTER = f"{JOB}-master-0"
WORKER = f"{JOB}-worker-0"


def two_pods_on_the_cpu(job: dict[str, Any], claim: Path) -> tuple[list[ReplicaCommand], list[str]]:
    """The dev stack's 2 pods as local processes, the rendezvous on port 4321."""
    return replica_commands(
        job, ReplicaPlan("default", claim, 4321), repo_root=REPO_ROOT, visible_devices=["", ""]
    )


def test_each_replica_gets_the_operator_env_with_a_local_rendezvous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "7")  # the host's own launcher variables must not leak in
    monkeypatch.setenv("PET_NNODES", "9")
    settings = load_stack_file("dev", REPO_ROOT)
    job = pytorchjob_manifest(settings, image="local")

    commands, notices = two_pods_on_the_cpu(job, tmp_path)

    assert notices == []
    assert [command.name for command in commands] == [MASTER, WORKER]
    # The operator's values (see test_operator_env) except the documented local rendezvous.
    for rank, command in enumerate(commands):
        expected = {
            "PYTHONUNBUFFERED": "1",  # training-operator v1.9 sets "1" (v1.8 and older "0")
            "MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "4321",
            "PET_MASTER_PORT": "4321",
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "PET_NODE_RANK": str(rank),
            "PET_NPROC_PER_NODE": "1",
            "PET_NNODES": "2",
            "OMP_NUM_THREADS": "1",  # the container's own env (cpu "1" / 1 process)
            "HOSTNAME": command.name,
            "CUDA_VISIBLE_DEVICES": "",
        }
        assert {key: command.env.get(key) for key in expected} == expected
        assert command.env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
        assert command.restart_policy == "OnFailure"


def elastic_dev(min_nodes: int = 1) -> StackSettings:
    """The dev stack made elastic: its 2 pods, training on 1 or 2 of them."""
    settings = load_stack_file("dev", REPO_ROOT)
    job = dataclasses.replace(settings.job, elastic=ElasticSettings(min_nodes=min_nodes))
    return dataclasses.replace(settings, job=job)


def test_an_elastic_job_runs_as_agents_of_a_loopback_rendezvous_on_worker_0(
    tmp_path: Path,
) -> None:
    job = pytorchjob_manifest(elastic_dev(), image="local")

    commands, _ = two_pods_on_the_cpu(job, tmp_path)

    assert [command.name for command in commands] == [WORKER, f"{JOB}-worker-1"]
    for index, command in enumerate(commands):
        expected = {
            "PET_RDZV_ENDPOINT": "127.0.0.1:4321",  # stands in for ddp-dev-worker-0:23456
            "PET_RDZV_BACKEND": "c10d",
            "PET_NNODES": "1:2",
            "PET_MAX_RESTARTS": "3",
            "PET_LOCAL_ADDR": "127.0.0.1",
            "PET_RDZV_CONF": f"is_host={int(index == 0)}",  # the store on worker-0's agent
        }
        assert {key: command.env.get(key) for key in expected} == expected
        assert "MASTER_ADDR" not in command.env and "PET_NODE_RANK" not in command.env
        args = command.argv[command.argv.index("--") + 1 :]
        assert args[args.index("--global-batch-size") + 1] == "64"  # 32 x 2 pods x 1 process


def test_container_paths_map_to_the_checkout_and_the_local_claim(tmp_path: Path) -> None:
    settings = apply_overrides(
        load_stack_file("dev", REPO_ROOT), overrides(epochs=4, save_every=1, dataset_size=256)
    )
    job = pytorchjob_manifest(settings, image="local")

    commands, _ = two_pods_on_the_cpu(job, tmp_path)

    argv = list(commands[1].argv)
    assert argv[0] == str(REPO_ROOT / "trainer" / "entrypoint.sh")
    assert argv[1:] == [
        "--max-restarts",
        "0",
        "--",
        "--batch_size",
        "32",
        "4",
        "1",
        "--checkpoint-dir",
        str(tmp_path / JOB),
        "--dataset-size",
        "256",
    ]
    assert commands[1].cwd == REPO_ROOT


def test_without_enough_gpus_the_job_runs_on_the_cpu_with_a_notice() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs the prod stack asks for")
    settings = load_stack_file("prod", REPO_ROOT)  # 2 nodes x 1 GPU

    local, devices, notice = choose_devices(settings)

    assert local.job.gpus_per_node == 0
    assert devices == ["", ""]
    assert notice is not None and "running on the CPU" in notice
    assert pytorchjob_manifest(local, image="local")["spec"]["nprocPerNode"] == "1"


def digits_on_the_cpu(**job: object) -> StackSettings:
    """The example stack (your own script), on the CPU as this machine runs it."""
    settings = load_stack_file("digits", REPO_ROOT)
    job = {"gpus_per_node": 0, **job}
    return dataclasses.replace(settings, job=dataclasses.replace(settings.job, **job))


def test_your_own_command_runs_in_its_directory_with_the_contract_mapped_here(
    tmp_path: Path,
) -> None:
    settings = digits_on_the_cpu()
    code = REPO_ROOT / "examples" / "digits"
    job = pytorchjob_manifest(settings, image="local")

    commands, notices = replica_commands(
        job,
        ReplicaPlan(
            "default", tmp_path / "claim", 4321, data_dirs={"digits-data": tmp_path / "data"}
        ),
        repo_root=REPO_ROOT,
        visible_devices=["", ""],
        code_dir=code,
    )

    assert notices == []
    for command in commands:
        # The venv's torchrun (first on PATH), which reads the pod's PET_* variables.
        assert command.argv == ["torchrun", "--max-restarts", "0", "train.py", "--epochs", "30"]
        assert command.cwd == code  # the image's WORKDIR, where its Dockerfile puts this code
        assert command.env["PYTHONPATH"].split(os.pathsep)[0] == str(code)
        assert command.env["CHECKPOINT_DIR"] == str(tmp_path / "claim" / "digits")
        assert command.env["DATA_DIR"] == str(tmp_path / "data")  # the claim's mount, mapped
        assert (command.env["JOB_NAME"], command.env["STACK_NAME"]) == ("digits", "digits")
        assert command.env["PET_NNODES"] == "2"


def test_paths_in_your_images_code_directory_map_to_your_directory(tmp_path: Path) -> None:
    settings = digits_on_the_cpu(command=("/opt/pytorch-distributed/train.py",), launcher="none")
    job = pytorchjob_manifest(settings, image="local")
    code = REPO_ROOT / "examples" / "digits"

    commands, _ = replica_commands(
        job,
        ReplicaPlan("default", tmp_path, 4321),
        repo_root=REPO_ROOT,
        visible_devices=["", ""],
        code_dir=code,
    )

    assert commands[0].argv == [str(code / "train.py")]
    # A trainer-based image of your own still finds the trainer where it is.
    trainer = pytorchjob_manifest(
        dataclasses.replace(settings, job=load_stack_file("dev", REPO_ROOT).job), image="local"
    )
    trainer_commands, _ = replica_commands(
        trainer,
        ReplicaPlan("default", tmp_path, 4321),
        repo_root=REPO_ROOT,
        visible_devices=["", ""],
        code_dir=code,
    )
    assert trainer_commands[0].argv[0] == str(REPO_ROOT / "trainer" / "entrypoint.sh")
    assert trainer_commands[0].cwd == code


def test_a_secret_variable_comes_from_this_users_environment_or_is_said_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from settings.stack import REDACTED

    settings = digits_on_the_cpu(secret_env={"HF_TOKEN": REDACTED})
    job = pytorchjob_manifest(settings, image="local")

    def commands() -> tuple[list[ReplicaCommand], list[str]]:
        return replica_commands(
            job,
            ReplicaPlan("default", tmp_path, 4321),
            repo_root=REPO_ROOT,
            visible_devices=["", ""],
        )

    monkeypatch.delenv("HF_TOKEN", raising=False)
    missing, notices = commands()
    assert "HF_TOKEN" not in missing[0].env
    assert notices[0] == (
        "env HF_TOKEN comes from Secret digits-env (job.secretEnv), which only the cluster "
        "holds: not set locally; export HF_TOKEN to give it to the replicas"
    )
    monkeypatch.setenv("HF_TOKEN", "hf_local-value")
    given, notices = commands()
    assert notices == [] and given[0].env["HF_TOKEN"] == "hf_local-value"
