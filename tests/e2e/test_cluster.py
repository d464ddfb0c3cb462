"""The one-machine cluster as a new user meets it (cluster/), with a stack of their own code:
the commands of docs/tutorials/your-own-model.md's one-machine-cluster path, as typed, in the
environment such a user has (HOME, the system's PATH, PULUMI_CONFIG_PASSPHRASE,
PULUMI_SKIP_CONFIRMATIONS, and the suite's PULUMI_HOME with nothing logged in): no backend, no
kubeconfig, no Pulumi CLI, no Docker engine of their own.

- `make config STACK=digits-local` sets the stack's secret from stdin on the backend `make` uses
  (`.pulumi-state/` without a login), before any cluster runs;
- `make up STACK=digits-local` (the digits example's stack for the cluster: its kubeContext is the
  cluster's, its name is not `local`) starts the cluster in the background, builds the
  example's image through its podman Docker API, pushes it to its registry and returns once the
  job succeeded on its real node; the cluster outlives the make that started it, a second `make
  cluster` says it is up, and `make cluster-status` sees every part answer (Kueue's LocalQueue
  `local` among them);
- `make status` shows the job and the script's log (the secret reached the pods), `make
  checkpoint` copies the script's checkpoint, and its weights are bit for bit those `make local`
  of the same stack trains as processes here;
- `make destroy` removes the job and keeps the claim; `make cluster-down` leaves no process,
  mount (the node's network and mount namespaces are held by mounts) or cgroup of it.

Its registry takes a free port here (`CLUSTER_REGISTRY_PORT`, the stack file's address set to
it: the suite's one change to the committed stack), so a user's own cluster on 5000 may run
meanwhile, and keeps its images beside the suite's real nodes' (the base image's layers are
pushed once).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from builders.manifests import resource_names
from cluster.service import TAG, ClusterDir, Running, leftovers, mounts_under, running
from cluster.stacks import on_cluster
from machine import procs
from machine.ports import free_port
from settings.stack import PROJECT, load_stack_file
from tests.conftest import REPO_ROOT
from tests.containers import remove_images_for
from tests.e2e.conftest import PASSPHRASE, Cluster, Project, command_status
from tests.e2e.kube import NamespaceObjects
from tests.e2e.user_environment import SYSTEM_PATH

# The cluster starts, the example's image is built on the 5 GB base image, pushed and pulled.
pytestmark = pytest.mark.timeout(2400)

STACK = "digits-local"
TOKEN = "hf_e2e-cluster-not-real-51c2e7"
SECRET_KEY = f"{PROJECT}:job.secretEnv.HF_TOKEN"


@dataclasses.dataclass(frozen=True)
class NewUser:
    """The suite's checkout as a new user drives it, and where the cluster keeps its state."""

    project: Project
    directory: ClusterDir
    registry_port: int

    def make(
        self, target: str, *, stdin: str | None = None, **variables: str
    ) -> subprocess.CompletedProcess[str]:
        """`make TARGET STACK=digits-local ...` as the user types it; its recipe's exit status
        is `command_status` of the result."""
        return self.project.make(target, check=False, stdin=stdin, **{"STACK": STACK, **variables})

    def cluster(self) -> Running:
        current = running(self.directory)
        assert current is not None, self.directory.log.read_text()
        return current

    def objects(self) -> NamespaceObjects:
        current = self.cluster()
        namespace = load_stack_file(STACK, self.project.work_dir).namespace
        return NamespaceObjects(Cluster(Path(current.kubeconfig), None), namespace)


@pytest.fixture(scope="module")
def user(project: Project, real_node_registry: Path) -> Iterator[NewUser]:
    if os.environ.get("PD_E2E_KUBECONFIG"):
        pytest.skip("an external cluster: the one-machine cluster's binaries are not built")
    work_dir = project.work_dir
    # The example and its stack, as the user's clone has them.
    shutil.copytree(
        REPO_ROOT / "examples" / "digits",
        work_dir / "examples" / "digits",
        ignore=shutil.ignore_patterns("__pycache__"),
        dirs_exist_ok=True,
    )
    port = free_port()
    stack_text = (REPO_ROOT / f"Pulumi.{STACK}.yaml").read_text()
    (work_dir / f"Pulumi.{STACK}.yaml").write_text(
        stack_text.replace("127.0.0.1:5000", f"127.0.0.1:{port}")
    )
    assert on_cluster(STACK, work_dir)
    directory = ClusterDir(work_dir / ".cluster")
    directory.path.mkdir(exist_ok=True)
    directory.registry.symlink_to(real_node_registry, target_is_directory=True)
    new_user = dataclasses.replace(
        project,
        variables={
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_CONFIRMATIONS": "true",
            # The suite's own, with nothing logged in: the user's ~/.pulumi stays as it is.
            "PULUMI_HOME": project.variables["PULUMI_HOME"],
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        },
        path=SYSTEM_PATH,
    )
    try:
        yield NewUser(new_user, directory, port)
    finally:
        new_user.make("cluster-down", check=False)
        remove_images_for(f"127.0.0.1:{port}")


def test_make_config_sets_a_secret_on_makes_backend_before_any_cluster_runs(
    user: NewUser,
) -> None:
    assert running(user.directory) is None
    done = user.make("config", stdin=f"{TOKEN}\n", CONFIG_ARGS=f"set --secret --path {SECRET_KEY}")
    assert command_status(done) == 0, done.stdout + done.stderr
    backend = f"file://{user.project.work_dir}/.pulumi-state"
    assert f"for a bare pulumi in your shell: export PULUMI_BACKEND_URL={backend})" in done.stderr
    stack_file = yaml.safe_load((user.project.work_dir / f"Pulumi.{STACK}.yaml").read_text())
    assert "secure" in stack_file["config"][f"{PROJECT}:job"]["secretEnv"]["HF_TOKEN"]
    assert TOKEN not in (user.project.work_dir / f"Pulumi.{STACK}.yaml").read_text()
    assert running(user.directory) is None, "config started the cluster"


def test_make_up_of_the_users_stack_starts_the_cluster_and_trains_there(user: NewUser) -> None:
    done = user.make("up", CLUSTER_REGISTRY_PORT=str(user.registry_port))
    assert command_status(done) == 0, done.stdout + done.stderr
    started = "make: the one-machine cluster is up (it keeps running"
    assert started in done.stderr, done.stdout + done.stderr
    current = user.cluster()
    assert current.registry == f"127.0.0.1:{user.registry_port}"
    # The make that started it has exited; the supervisor and its components run on.
    assert procs.is_alive(current.supervisor)
    assert len(procs.tagged(TAG, user.directory.tag)) >= 10, "plane, node, registry, Docker API"
    settings = load_stack_file(STACK, user.project.work_dir)
    job = user.objects().custom_object("kubeflow.org", "v1", "pytorchjobs", settings.job.name)
    assert job is not None
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Succeeded") == "True", job["status"]
    [container] = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert container["image"].startswith(f"127.0.0.1:{user.registry_port}/digits-example@sha256:")
    assert container["args"][-3:] == ["train.py", "--epochs", "10"]
    # The script reports its progress the documented way, and `pulumi up`'s wait says it (in
    # the engine's diagnostics, which the CLI writes to stderr).
    said = done.stdout + done.stderr
    assert f"{settings.job.name}: finished 10/10 epochs, " in said, said


def test_a_second_make_cluster_says_it_is_up_and_every_part_answers(user: NewUser) -> None:
    current = user.cluster()
    again = user.project.make("cluster", CLUSTER_REGISTRY_PORT=str(user.registry_port))
    assert "the one-machine cluster was already up" in again.stdout, again.stdout
    assert f"export KUBECONFIG={current.kubeconfig} " in again.stdout
    assert running(user.directory) == current

    status = user.project.make("cluster-status")
    parts = [line.split(None, 1) for line in status.stdout.splitlines()[1:6]]
    assert [state for state, _ in parts] == ["ok"] * 5, status.stdout
    assert parts[4][1].startswith("Kueue, LocalQueue local"), status.stdout


def test_make_status_shows_the_job_and_the_scripts_log(user: NewUser) -> None:
    done = user.make("status")
    assert command_status(done) == 0, done.stdout + done.stderr
    assert "Succeeded" in done.stdout, done.stdout + done.stderr
    assert "epoch 10/10" in done.stdout, done.stdout + done.stderr
    assert "Progress: finished 10/10 epochs, " in done.stdout, done.stdout
    assert "HF_TOKEN is set" in done.stdout and TOKEN not in done.stdout + done.stderr


def test_make_checkpoint_copies_the_weights_make_local_trains_bit_for_bit(
    user: NewUser, tmp_path: Path
) -> None:
    out = tmp_path / "retrieved"
    copied = user.make("checkpoint", OUT=str(out))
    assert command_status(copied) == 0, copied.stdout + copied.stderr
    on_the_cluster = torch.load(out / "checkpoint.pt", map_location="cpu")
    assert on_the_cluster["epoch"] == 10

    here = user.make("local")
    assert command_status(here) == 0, here.stdout + here.stderr
    assert "job digits: Succeeded" in here.stdout, here.stdout + here.stderr
    job_dir = user.project.work_dir / ".checkpoints" / STACK / "digits"
    locally = torch.load(job_dir / "checkpoint.pt", map_location="cpu")
    assert locally["epoch"] == 10
    assert on_the_cluster["model"].keys() == locally["model"].keys()
    for name, weights in on_the_cluster["model"].items():
        assert torch.equal(weights, locally["model"][name]), name
    momentum = [s["momentum_buffer"] for s in on_the_cluster["optimizer"]["state"].values()]
    local_momentum = [s["momentum_buffer"] for s in locally["optimizer"]["state"].values()]
    assert all(torch.equal(a, b) for a, b in zip(momentum, local_momentum, strict=True))


def test_make_destroy_removes_the_job_and_keeps_the_claim(user: NewUser) -> None:
    settings = load_stack_file(STACK, user.project.work_dir)
    claim_name = resource_names(settings).claim
    claim = user.objects().get("persistent_volume_claim", claim_name)
    assert claim is not None
    done = user.make("destroy")
    assert command_status(done) == 0, done.stdout + done.stderr
    objects = user.objects()
    assert objects.custom_object("kubeflow.org", "v1", "pytorchjobs", settings.job.name) is None
    kept = objects.get("persistent_volume_claim", claim_name)
    assert kept is not None and kept["metadata"]["uid"] == claim["metadata"]["uid"]


def test_make_cluster_down_leaves_nothing(user: NewUser) -> None:
    down = user.project.make("cluster-down", check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "the one-machine cluster is down: no process, mount" in down.stdout, down.stdout
    assert leftovers(user.directory) == []
    assert procs.tagged(TAG, user.directory.tag) == []
    assert mounts_under(user.directory.path) == []

    gone = user.project.make("cluster-status", check=False)
    assert command_status(gone) == 1
    assert "the one-machine cluster is not running: `make cluster` starts it" in gone.stdout
    after = user.make("status")
    assert command_status(after) == 2
    assert "the one-machine cluster is not running" in after.stderr
