"""trainer/entrypoint.sh as the pod runs it: rendezvous from the operator's environment."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from machine.ports import free_port
from tests.conftest import REPO_ROOT
from tests.trainer.conftest import PYTHON, TIMEOUT_S, inspect, trainer_env

ENTRYPOINT = REPO_ROOT / "trainer" / "entrypoint.sh"


def pod_env(env: dict[str, str]) -> dict[str, str]:
    """The test's environment without any launcher variables, plus what the "operator" sets."""
    base = trainer_env({"TRAINER_PYTHON": PYTHON})
    for name in [name for name in base if name.startswith(("PET_", "MASTER_"))]:
        del base[name]
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        base.pop(name, None)
    base.pop("PYTHONPATH")  # the script must find the package by itself
    return {**base, **env}


def run_entrypoint(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENTRYPOINT), *args],
        cwd="/",
        env=pod_env(env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.mark.slow
def test_trains_with_the_kubeflow_pet_variables(tmp_path: Path) -> None:
    env = {
        "PET_NNODES": "1",
        "PET_NODE_RANK": "0",
        "PET_NPROC_PER_NODE": "2",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(free_port()),
    }
    args = ["--max-restarts", "1", "--", "3", "2", "--checkpoint-dir", str(tmp_path)]
    done = run_entrypoint([*args, "--dataset-size", "64"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "max_restarts=1" in done.stderr
    info = inspect(tmp_path)
    assert info["epochs_completed"] == 3 and info["world_size"] == 2


@pytest.mark.slow
def test_falls_back_to_master_addr_and_port(tmp_path: Path) -> None:
    env = {
        "PET_NPROC_PER_NODE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    args = ["2", "1", "--checkpoint-dir", str(tmp_path), "--dataset-size", "64"]
    done = run_entrypoint(args, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"master=127.0.0.1:{env['MASTER_PORT']}" in done.stderr
    assert inspect(tmp_path)["world_size"] == 2


@pytest.mark.slow
def test_the_pod_exits_with_the_trainers_code_and_one_error_line(tmp_path: Path) -> None:
    """A refusal is permanent (2; torchrun itself would exit 1 for any failure): the restart
    policy must be able to tell it from a preemption (143)."""
    env = {"PET_NPROC_PER_NODE": "2", "PET_MASTER_ADDR": "127.0.0.1"}
    env["PET_MASTER_PORT"] = str(free_port())
    done = run_entrypoint(["--", "10", "0", "--checkpoint-dir", str(tmp_path / "x")], env)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert output.count("argument SAVE_EVERY") == 1, output  # rank 0 only
    assert "Traceback" not in output
    assert re.search(r"trainer\.launch: trainer rank [01] exited with code 2", output), output
    assert not (tmp_path / "x").exists()


def test_rejects_a_bad_max_restarts_before_launching() -> None:
    done = run_entrypoint(["--max-restarts", "many", "--", "10", "5"], {})
    assert done.returncode == 2
    assert "--max-restarts must be an integer >= 0, got 'many'" in done.stderr


@pytest.mark.slow
def test_an_old_operators_world_size_and_rank_make_a_two_pod_job(tmp_path: Path) -> None:
    """training-operator <= v1.6 sets WORLD_SIZE = pods and RANK = pod index, no PET_*."""
    common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    args = ["2", "1", "--checkpoint-dir", str(tmp_path), "--dataset-size", "64"]
    pods = [
        subprocess.Popen(
            [str(ENTRYPOINT), *args],
            cwd="/",
            env=pod_env({**common, "RANK": str(rank)}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [pod.communicate(timeout=TIMEOUT_S) for pod in pods]
    for pod, (out, err) in zip(pods, outputs, strict=True):
        assert pod.returncode == 0, out + err
    for rank, (_, err) in enumerate(outputs):
        assert f"nnodes=2 node_rank={rank} nproc_per_node=1" in err
        assert "nodes and rank from WORLD_SIZE/RANK" in err
    info = inspect(tmp_path)
    assert info["world_size"] == 2 and info["epochs_completed"] == 2


@pytest.mark.slow
def test_without_any_launcher_variables_it_says_it_runs_one_node(tmp_path: Path) -> None:
    done = run_entrypoint(["1", "1", "--checkpoint-dir", str(tmp_path), "--dataset-size", "16"], {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nnodes=1 node_rank=0" in done.stderr
    assert "nodes and rank from defaults" in done.stderr


def test_a_rank_outside_the_world_size_is_refused_before_launching() -> None:
    done = run_entrypoint(["--", "10", "5"], {"WORLD_SIZE": "2", "RANK": "2"})
    assert done.returncode == 2
    assert "RANK must be the pod's index (0..1) when PET_NNODES is unset, got '2'" in done.stderr


@pytest.mark.slow
def test_an_elastic_pod_joins_the_c10d_rendezvous_the_operator_names(tmp_path: Path) -> None:
    """elasticPolicy's variables: torchrun as an agent of the c10d rendezvous (here one node of
    at most two, alone on loopback), the restarts from PET_MAX_RESTARTS."""
    env = {
        "PET_NNODES": "1:2",
        "PET_NPROC_PER_NODE": "2",
        "PET_RDZV_ENDPOINT": f"127.0.0.1:{free_port()}",
        "PET_RDZV_BACKEND": "c10d",
        "PET_MAX_RESTARTS": "4",
        "PET_RDZV_CONF": "last_call_timeout=1",  # alone: close the rendezvous at once
        "PET_LOCAL_ADDR": "127.0.0.1",
    }
    done = run_entrypoint(
        ["2", "1", "--checkpoint-dir", str(tmp_path), "--dataset-size", "64"], env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torchrun elastic nnodes=1:2 nproc_per_node=2" in done.stderr
    assert f"rendezvous=c10d@{env['PET_RDZV_ENDPOINT']} max_restarts=4" in done.stderr
    info = inspect(tmp_path)
    assert info["world_size"] == 2 and info["epochs_completed"] == 2


def test_an_elastic_node_range_that_is_not_one_is_refused_before_launching() -> None:
    done = run_entrypoint(["--", "10", "5"], {"PET_RDZV_ENDPOINT": "x:1", "PET_NNODES": "2-4"})
    assert done.returncode == 2
    assert "PET_NNODES must be N or MIN:MAX (nodes, >= 1) with PET_RDZV_ENDPOINT, got '2-4'" in (
        done.stderr
    )
