"""The component as other programs use it, through the real engine with the plain CLI, each
program in its own directory with the platform program's values (SAME_SETTINGS): the platform
program (examples/platform-program) installs this repository's package (`pulumi install`: pip,
from PyPI or its cache); through the component package (provider/, `pulumi package add`), a Pulumi
YAML program (examples/yaml-program, run by the YAML language host `make e2e-tools` builds) and a
Python program on the SDK the CLI generates (examples/sdk-program). Each previews exactly the
Kubernetes objects this repository's own program declares for a stack of the same values, creates
the job through its own provider, previews no change after, and destroy leaves nothing. The
stack-reference pair (examples/stack-references) creates its job with the cluster stack's
kubeconfig, registry and storage class, and the cluster stack's secrets stay secret in the
training stack's state."""

from __future__ import annotations

import difflib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.control_plane import STORAGE_CLASS
from tests.e2e.conftest import CLI_TIMEOUT_S, Cluster, Project
from tests.e2e.kube import NamespaceObjects
from tests.examples.programs import stack_file
from tests.examples.test_platform_program import SAME_SETTINGS


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


def program(project: Project, directory: Path, stack: str, *setup: str) -> Iterator[Path]:
    """A program's stack, made ready by `setup` (a pulumi command), destroyed and removed after."""
    cli(project, directory, "stack", "select", "--create", stack)
    cli(project, directory, *setup)
    yield directory
    cli(project, directory, "destroy", "--yes", "--skip-preview", check=False)
    cli(project, directory, "stack", "rm", "--yes", "--force", stack, check=False)


def pytorchjob(cluster: Cluster, namespace: str, name: str) -> Any | None:
    return NamespaceObjects(cluster, namespace).custom_object(
        "kubeflow.org", "v1", "pytorchjobs", name
    )


# -- the programs with the platform program's values ---------------------------------------------

# How each reaches the component: the package itself, or the component package through the SDK
# `pulumi package add` generates (the provider's directory as the examples name it).
SETUP = {
    "platform-program": ("install",),
    "sdk-program": ("package", "add", "../../provider"),
    "yaml-program": ("package", "add", "../../provider"),
}
# Every program's stack, and this repository's of the same values: the pods' STACK_NAME is the
# stack's name.
SAME_VALUES_STACK = "e2e-package"
JOB = SAME_SETTINGS["job"]["name"]


def kubernetes_objects(preview: str) -> dict[str, tuple[str, Any]]:
    """What a `pulumi preview --json` would create of Kubernetes objects, by resource name: type
    and inputs (the providers, each program's own, left out)."""
    steps = json.loads(preview).get("steps", [])
    objects = {}
    for step in steps:
        state = step.get("newState") or {}
        kind = state.get("type", "")
        if kind.startswith("kubernetes:"):
            objects[step["urn"].rsplit("::", 1)[1]] = (kind, state.get("inputs"))
    return objects


@pytest.fixture(scope="module")
def same_values_preview(project: Project) -> dict[str, tuple[str, Any]]:
    """This repository's program, for a stack of the programs' values."""
    stack_file(project.work_dir, SAME_VALUES_STACK, SAME_SETTINGS)
    project.cli("stack", "select", "--create", SAME_VALUES_STACK)
    try:
        preview = project.cli("preview", "--json", "--stack", SAME_VALUES_STACK).stdout
    finally:
        project.cli("stack", "rm", "--yes", "--force", SAME_VALUES_STACK, check=False)
    objects = kubernetes_objects(preview)
    assert {kind for kind, _ in objects.values()} >= {
        "kubernetes:kubeflow.org/v1:PyTorchJob",
        "kubernetes:core/v1:PersistentVolumeClaim",
    }, objects
    return objects


@pytest.fixture(scope="module", params=sorted(SETUP))
def example(
    request: pytest.FixtureRequest, project: Project, package_checkout: Path
) -> Iterator[Path]:
    directory = package_checkout / "examples" / request.param
    yield from program(project, directory, SAME_VALUES_STACK, *SETUP[request.param])


def test_only_package_add_records_the_package_in_the_program(example: Path) -> None:
    project_file = yaml.safe_load((example / "Pulumi.yaml").read_text(encoding="utf-8"))
    recorded = (project_file.get("packages") or {}).get("pytorch-distributed")
    assert (recorded == "../../provider") == (SETUP[example.name][0] == "package"), project_file


def test_the_program_previews_what_this_repositorys_program_declares(
    project: Project, example: Path, same_values_preview: dict[str, tuple[str, Any]]
) -> None:
    declared = kubernetes_objects(cli(project, example, "preview", "--json"))
    assert declared == same_values_preview, "\n".join(
        difflib.unified_diff(
            json.dumps(same_values_preview, indent=1, sort_keys=True).splitlines(),
            json.dumps(declared, indent=1, sort_keys=True).splitlines(),
            "this repository's program",
            example.name,
            lineterm="",
        )
    )


def test_the_program_creates_the_job_and_then_expects_no_changes(
    project: Project, cluster: Cluster, example: Path
) -> None:
    cli(project, example, "up", "--yes", "--skip-preview")
    job = pytorchjob(cluster, "default", JOB)
    assert job is not None
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    outputs = json.loads(cli(project, example, "stack", "output", "--json"))
    assert outputs["jobName"] == JOB
    preview = json.loads(cli(project, example, "preview", "--json"))
    assert {step["op"] for step in preview.get("steps", [])} <= {"same"}


def test_destroying_the_program_leaves_nothing(
    project: Project, cluster: Cluster, example: Path
) -> None:
    cli(project, example, "destroy", "--yes", "--skip-preview")
    assert pytorchjob(cluster, "default", JOB) is None
    claim = NamespaceObjects(cluster, "default").get(
        "persistent_volume_claim", f"{JOB}-checkpoints"
    )
    assert claim is None


# -- a training stack that reads a cluster stack ------------------------------------------------


def test_the_training_stack_reads_the_cluster_stack(
    project: Project, cluster: Cluster, package_checkout: Path
) -> None:
    pair = package_checkout / "examples" / "stack-references"
    clusters = program(project, pair / "cluster", "dev", "install")
    cluster_dir = next(clusters)
    kubeconfig = Path(project.variables["KUBECONFIG"]).read_text(encoding="utf-8")
    cli(project, cluster_dir, "config", "set", "--secret", "kubeconfig", "--", kubeconfig)
    cli(project, cluster_dir, "config", "set", "--secret", "registryPassword", "not-a-secret")
    # The suite's plane's class (its example value, "standard", is a cloud cluster's).
    cli(project, cluster_dir, "config", "set", "storageClass", STORAGE_CLASS)
    cli(project, cluster_dir, "up", "--yes", "--skip-preview")
    trainings = program(project, pair / "training", "dev", "install")
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
