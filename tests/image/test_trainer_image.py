"""The training image built from trainer/Dockerfile: entrypoint.sh trains, checkpoints and resumes
inside it exactly as on the host (2 processes under torchrun, checkpoints on a mounted volume),
as its numeric non-root user, on a volume given to that user's group as the kubelet gives a pod's
fsGroup its claim."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from machine.ports import free_port
from settings.stack import TRAINER_GID, TRAINER_UID
from tests.containers import podman, run_container
from tools.local_backends.container import give_to_fs_group

# The first test also builds the images (a cold base image takes about 9 minutes on 2 cores).
pytestmark = [pytest.mark.container, pytest.mark.timeout(1800)]

ENTRYPOINT = "/opt/pytorch-distributed/trainer/entrypoint.sh"


def train_in_container(image: str, checkpoint_dir: Path, epochs: int) -> str:
    give_to_fs_group(checkpoint_dir, TRAINER_GID)  # the kubelet's part, for the pods' fsGroup
    port = free_port()
    options = [
        *("--network", "host"),  # loopback only: no container bridge
        *("--volume", f"{checkpoint_dir}:/checkpoints"),
        *("--env", "PET_NNODES=1", "--env", "PET_NODE_RANK=0", "--env", "PET_NPROC_PER_NODE=2"),
        *("--env", "PET_MASTER_ADDR=127.0.0.1", "--env", f"PET_MASTER_PORT={port}"),
        *("--env", "OMP_NUM_THREADS=1"),
        *("--entrypoint", ENTRYPOINT),
    ]
    trainer_args = ["--", str(epochs), "1", "--checkpoint-dir", "/checkpoints/run"]
    done = run_container(
        image,
        options,
        [*trainer_args, "--dataset-size", "128"],
        name=f"image-test-{uuid.uuid4().hex[:8]}",
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def inspect_in_container(image: str, checkpoint_dir: Path) -> dict[str, object]:
    done = podman(
        "run", "--rm", "--network", "none", "--volume", f"{checkpoint_dir}:/checkpoints",
        image, "python", "-m", "trainer.checkpoint", "/checkpoints/run",
    )  # fmt: skip
    return json.loads(done.stdout)


def test_image_has_the_trainer_on_the_dockerfiles_paths(trainer_image: str) -> None:
    listed = podman(
        "run", "--rm", "--network", "none", trainer_image,
        "sh", "-c", "command -v torchrun; pwd; test -x trainer/entrypoint.sh && echo executable",
    )  # fmt: skip
    torchrun, workdir, executable = listed.stdout.split()
    assert torchrun == "/opt/venv/bin/torchrun"
    assert workdir == "/opt/pytorch-distributed"
    assert executable == "executable"
    config = json.loads(podman("image", "inspect", trainer_image).stdout)[0]["Config"]
    assert config["Cmd"] == [ENTRYPOINT, "--", "100", "25"]
    assert config["User"] == f"{TRAINER_UID}:{TRAINER_GID}"


def test_the_image_runs_as_its_numeric_user_with_tmp_and_home_writable(
    trainer_image: str,
) -> None:
    probe = (
        'id -u; id -g; echo "$HOME"; touch /tmp/probe "$HOME/probe" /checkpoints/probe && echo ok'
    )
    done = podman("run", "--rm", "--network", "none", trainer_image, "sh", "-c", probe)
    assert done.stdout.split() == [str(TRAINER_UID), str(TRAINER_GID), "/home/trainer", "ok"]
    # Another user, as job.securityContext.runAsUser makes it on a node: torchrun's temporary
    # directory still works.
    other = podman(
        "run", "--rm", "--network", "none", "--user", "4242:4242", trainer_image,
        "python3", "-c", "import tempfile; print(tempfile.mkdtemp())",
    )  # fmt: skip
    assert other.stdout.startswith("/tmp/")


def test_entrypoint_trains_checkpoints_and_resumes_inside_the_image(
    trainer_image: str, tmp_path: Path
) -> None:
    first = train_in_container(trainer_image, tmp_path, epochs=2)
    assert "entrypoint.sh: torchrun nnodes=1 node_rank=0 nproc_per_node=2" in first
    assert inspect_in_container(trainer_image, tmp_path)["epochs_completed"] == 2

    second = train_in_container(trainer_image, tmp_path, epochs=3)

    resumed = [line for line in second.splitlines() if "resuming from" in line]
    assert resumed and "/checkpoints/run" in resumed[0], second
    info = inspect_in_container(trainer_image, tmp_path)
    assert info["epochs_completed"] == 3 and info["world_size"] == 2
    assert (tmp_path / "run" / "snapshot.pt").is_file()  # written through the mount
    assert (tmp_path / "run" / "snapshot.pt").stat().st_uid == TRAINER_UID  # by the image's user
