"""The component as other programs use it, through the real engine with the plain CLI: the
platform program (examples/platform-program) installs this repository's package (`pulumi
install`: pip, from PyPI or its cache), creates the job through its own provider, previews no
change after, and destroy leaves nothing; the stack-reference pair (examples/stack-references)
does the same with the cluster stack's kubeconfig, registry and storage class, and the cluster
stack's secrets stay secret in the training stack's state. The YAML program through `pulumi
package add` is not here: it needs the YAML language host, which `make e2e-tools` does not build
yet (issue 36)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CLI_TIMEOUT_S, Cluster, Project
from tests.e2e.kube import NamespaceObjects
from tools.cluster.control_plane import STORAGE_CLASS


def cli(project: Project, directory: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["pulumi", *args],
        cwd=directory,
        env=project.environment(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    if check:
        assert done.returncode == 0, f"pulumi {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def program(project: Project, directory: Path, stack: str) -> Iterator[Path]:
    cli(project, directory, "stack", "select", "--create", stack)
    cli(project, directory, "install")
    yield directory
    cli(project, directory, "destroy", "--yes", "--skip-preview", check=False)
    cli(project, directory, "stack", "rm", "--yes", "--force", stack, check=False)


@pytest.fixture(scope="module")
def platform_program(project: Project, package_checkout: Path) -> Iterator[Path]:
    yield from program(project, package_checkout / "examples" / "platform-program", "dev")


def pytorchjob(cluster: Cluster, namespace: str, name: str) -> Any | None:
    return NamespaceObjects(cluster, namespace).custom_object(
        "kubeflow.org", "v1", "pytorchjobs", name
    )


def test_the_platform_program_creates_the_job_through_the_package(
    project: Project, cluster: Cluster, platform_program: Path
) -> None:
    cli(project, platform_program, "up", "--yes", "--skip-preview")
    job = pytorchjob(cluster, "default", "platform-ddp")
    assert job is not None
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    outputs = json.loads(cli(project, platform_program, "stack", "output", "--json"))
    assert outputs["jobName"] == "platform-ddp"
    preview = json.loads(cli(project, platform_program, "preview", "--json"))
    assert {step["op"] for step in preview.get("steps", [])} <= {"same"}


def test_destroying_the_platform_program_leaves_nothing(
    project: Project, cluster: Cluster, platform_program: Path
) -> None:
    cli(project, platform_program, "destroy", "--yes", "--skip-preview")
    assert pytorchjob(cluster, "default", "platform-ddp") is None
    claims = NamespaceObjects(cluster, "default").get(
        "persistent_volume_claim", "platform-ddp-checkpoints"
    )
    assert claims is None


def test_the_training_stack_reads_the_cluster_stack(
    project: Project, cluster: Cluster, package_checkout: Path
) -> None:
    pair = package_checkout / "examples" / "stack-references"
    clusters = program(project, pair / "cluster", "dev")
    cluster_dir = next(clusters)
    kubeconfig = Path(project.variables["KUBECONFIG"]).read_text(encoding="utf-8")
    cli(project, cluster_dir, "config", "set", "--secret", "kubeconfig", "--", kubeconfig)
    cli(project, cluster_dir, "config", "set", "--secret", "registryPassword", "not-a-secret")
    # The suite's plane's class (its example value, "standard", is a cloud cluster's).
    cli(project, cluster_dir, "config", "set", "storageClass", STORAGE_CLASS)
    cli(project, cluster_dir, "up", "--yes", "--skip-preview")
    trainings = program(project, pair / "training", "dev")
    training_dir = next(trainings)
    try:
        cli(project, training_dir, "up", "--yes", "--skip-preview")
        assert pytorchjob(cluster, "training", "referenced-ddp") is not None
        state = cli(project, training_dir, "stack", "export")
        assert "not-a-secret" not in state and kubeconfig not in state
    finally:
        next(trainings, None)
        next(clusters, None)
    assert pytorchjob(cluster, "training", "referenced-ddp") is None
