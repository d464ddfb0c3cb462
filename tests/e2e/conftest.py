"""Fixtures of the real-engine suite: the Pulumi CLI and providers, a control plane, a stack.

Two ways to run it:
- here and in CI: `make e2e` builds the tools (scripts/e2e-tools.sh, cached outside the clone)
  and starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the training operator
  and kwok on loopback (tools/control_plane.py);
- against your own CLI and cluster: `PD_E2E_PULUMI=$(command -v pulumi)
  PD_E2E_KUBECONFIG=~/.kube/config PD_E2E_IMAGE_REF=<trainer image@sha256:...> make e2e` (e.g.
  kind from scripts/kind-up.sh, with the training operator); `PD_E2E_STORAGE=hostpath` adds the
  suite's hostPath volumes for a one-node cluster without a ReadWriteMany provisioner. There the
  pods really run the trainer, so the job finishes by itself instead of by the suite's hand.

The program runs through the Automation API's inline language server, in this process, with the
real CLI as the engine: the Python language host (`pulumi-language-python`) is the one part of
the toolchain the Go module proxy does not serve (README, "The real-engine suite").
"""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tools.control_plane import ControlPlane, build_tools, create_hostpath_storage

PROJECT = "pytorch-distributed"
STACK = "e2e"
PASSPHRASE = "e2e-passphrase-not-a-secret"
# Unique enough that finding it anywhere in outputs or state means it leaked.
REGISTRY_PASSWORD = "e2e-registry-pa55word-7f3c9a1d"
KUBERNETES_PROVIDER_VERSION = "4.25.0"
STACK_FILE = Path(__file__).with_name("Pulumi.e2e.yaml")


@dataclass(frozen=True)
class Toolchain:
    pulumi: Path
    kubernetes_provider: Path | None
    bin_dir: Path | None


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    plane: ControlPlane | None

    @property
    def fake_nodes(self) -> bool:
        return self.plane is not None

    def api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    pulumi = os.environ.get("PD_E2E_PULUMI")
    if pulumi:
        return Toolchain(Path(pulumi), None, None)
    bin_dir = build_tools()
    return Toolchain(bin_dir / "pulumi", bin_dir / "pulumi-resource-kubernetes", bin_dir)


@pytest.fixture(scope="session")
def cluster(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    kubeconfig = os.environ.get("PD_E2E_KUBECONFIG")
    if kubeconfig:
        cluster = Cluster(Path(kubeconfig), None)
        if os.environ.get("PD_E2E_STORAGE") == "hostpath":
            create_hostpath_storage(cluster.api(), Path("/var/local/pd-e2e"), on_this_machine=False)
        yield cluster
        return
    assert toolchain.bin_dir is not None
    with ControlPlane(toolchain.bin_dir, tmp_path_factory.mktemp("control-plane")) as plane:
        yield Cluster(plane.kubeconfig, plane)


@pytest.fixture(scope="session")
def policy_pack() -> Path:
    """The repository's pack with its own virtualenv, created the documented way."""
    subprocess.run(["make", "--no-print-directory", "policy-venv"], cwd=REPO_ROOT, check=True)
    return REPO_ROOT / "policy"


def run_program() -> None:
    """The real __main__.py, exactly as `pulumi up` runs it."""
    runpy.run_path(str(REPO_ROOT / "__main__.py"), run_name="__main__")


@dataclass
class Project:
    """A project directory with the e2e stack file, the CLI's environment and a file backend."""

    work_dir: Path
    env: dict[str, str]
    toolchain: Toolchain

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the CLI itself (what a user types), in the project directory."""
        return subprocess.run(
            [str(self.toolchain.pulumi), *args, "--non-interactive"],
            cwd=self.work_dir,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=check,
        )

    def stack(self) -> Any:
        from pulumi import automation as auto

        command = auto.PulumiCommand(root=str(self.toolchain.pulumi.parent.parent))
        options = auto.LocalWorkspaceOptions(
            work_dir=str(self.work_dir),
            pulumi_home=self.env["PULUMI_HOME"],
            env_vars=self.env,
            pulumi_command=command,
        )
        return auto.create_or_select_stack(
            stack_name=STACK, project_name=PROJECT, program=run_program, opts=options
        )


@pytest.fixture(scope="module")
def project(
    toolchain: Toolchain, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Project:
    root = tmp_path_factory.mktemp("pulumi")
    work_dir = root / "project"
    work_dir.mkdir()
    shutil.copy(REPO_ROOT / "Pulumi.yaml", work_dir / "Pulumi.yaml")
    stack_file = yaml.safe_load(STACK_FILE.read_text())
    image_ref = os.environ.get("PD_E2E_IMAGE_REF")
    if image_ref:
        stack_file["config"][f"{PROJECT}:image"]["ref"] = image_ref
    (work_dir / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(stack_file, sort_keys=False))
    (root / "state").mkdir()
    path = os.environ["PATH"]
    if toolchain.bin_dir is not None:
        # pulumi-analyzer-policy-python (the policy pack's launcher) is found on PATH.
        path = f"{toolchain.bin_dir}{os.pathsep}{path}"
    env = {
        "PULUMI_HOME": str(root / "home"),
        "PULUMI_BACKEND_URL": f"file://{root / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        # Nothing is downloaded at run time: the provider comes from the file built here.
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": path,
    }
    project = Project(work_dir, env, toolchain)
    if toolchain.kubernetes_provider is not None:
        project.cli(
            "plugin",
            "install",
            "resource",
            "kubernetes",
            KUBERNETES_PROVIDER_VERSION,
            "--file",
            str(toolchain.kubernetes_provider),
        )
    return project


def stack_config(project: Project) -> dict[str, Any]:
    return yaml.safe_load((project.work_dir / f"Pulumi.{STACK}.yaml").read_text())["config"]
