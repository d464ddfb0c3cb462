"""cluster/stacks.py: which stacks run on the one-machine cluster (their kubeContext is its
context, whatever their name), read without a YAML parser and held here to the program's own
reading of every stack file; the one line for a stack that names the cluster's registry on
another context."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cluster import stacks
from cluster.stacks import CONTEXT, kube_context, names_registry, on_cluster, registry_notice
from settings.stack import PROJECT, load_stack_file
from tests.conftest import REPO_ROOT

STACK_DIRS = (REPO_ROOT, REPO_ROOT / "tests" / "e2e")


def stack_names(directory: Path) -> list[str]:
    return sorted(
        path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        for path in directory.glob("Pulumi.*.yaml")
    )


@pytest.mark.parametrize(
    ("directory", "stack"),
    [(directory, stack) for directory in STACK_DIRS for stack in stack_names(directory)],
)
def test_the_kube_context_read_without_yaml_is_the_programs(directory: Path, stack: str) -> None:
    text = (directory / f"Pulumi.{stack}.yaml").read_text()
    assert kube_context(text) == load_stack_file(stack, directory).kube_context


def test_the_key_is_the_projects() -> None:
    assert stacks.KUBE_CONTEXT.pattern.count(f"{PROJECT}:kubeContext:") == 1


@pytest.mark.parametrize(
    ("line", "context"),
    [
        ("  pytorch-distributed:kubeContext: pytorch-distributed-local", CONTEXT),
        ('  pytorch-distributed:kubeContext: "pytorch-distributed-local"  # the cluster', CONTEXT),
        ("    pytorch-distributed:kubeContext: 'kind-kind'", "kind-kind"),
        ("  pytorch-distributed:kubeContext: gke_p_z_c # prod", "gke_p_z_c"),
        ("  # pytorch-distributed:kubeContext: pytorch-distributed-local", None),
        ("  other-project:kubeContext: pytorch-distributed-local", None),
        ("  pytorch-distributed:namespace: default", None),
    ],
)
def test_kube_context_forms(line: str, context: str | None) -> None:
    assert kube_context(f"config:\n  pytorch-distributed:platform: kubeflow\n{line}\n") == context


def test_a_stack_of_the_cluster_is_any_stack_with_its_context(tmp_path: Path) -> None:
    assert on_cluster("local") and on_cluster("digits-local")
    assert not on_cluster("dev") and not on_cluster("digits") and not on_cluster("missing")
    mine = (REPO_ROOT / "Pulumi.local.yaml").read_text()
    (tmp_path / "Pulumi.mymodel.yaml").write_text(mine)
    assert on_cluster("mymodel", tmp_path)
    (tmp_path / "Pulumi.elsewhere.yaml").write_text(
        mine.replace(f"kubeContext: {CONTEXT}", "kubeContext: kind-kind")
    )
    assert not on_cluster("elsewhere", tmp_path)


def test_a_stack_naming_the_registry_on_another_context_is_told_so(tmp_path: Path) -> None:
    local = (REPO_ROOT / "Pulumi.local.yaml").read_text()
    (tmp_path / "Pulumi.moved.yaml").write_text(
        local.replace(f"kubeContext: {CONTEXT}", "kubeContext: kind-kind")
    )
    (tmp_path / "Pulumi.dropped.yaml").write_text(
        local.replace(f"  pytorch-distributed:kubeContext: {CONTEXT}\n", "")
    )
    (tmp_path / "Pulumi.local.yaml").write_text(local)
    assert registry_notice("moved", 5000, tmp_path) == (
        "note: stack moved names the one-machine cluster's registry 127.0.0.1:5000 but runs on "
        "kubeContext kind-kind, not the cluster: `make` gives it your own kubeconfig, Docker "
        "engine and Pulumi CLI; for the cluster set kubeContext: pytorch-distributed-local (as "
        "Pulumi.local.yaml does)"
    )
    dropped = registry_notice("dropped", 5000, tmp_path)
    assert dropped is not None and "runs on no kubeContext (KUBECONFIG's current one)" in dropped
    assert registry_notice("local", 5000, tmp_path) is None  # on the cluster
    assert registry_notice("moved", 5001, tmp_path) is None  # another registry
    assert registry_notice("dev", 5000) is None
    assert registry_notice("missing", 5000, tmp_path) is None


def test_only_a_value_names_the_registry() -> None:
    assert names_registry("    repository: 127.0.0.1:5000/trainer\n")
    assert names_registry("    server: localhost:5000\n")
    assert not names_registry("# pushed to 127.0.0.1:5000 by make up\n")
    assert not names_registry("    server: 127.0.0.1:50001\n")
    assert not names_registry("    server: 10.127.0.0.1:5000\n")


def test_the_command_make_asks(tmp_path: Path) -> None:
    """`python3 -m cluster.stacks`, with the interpreter alone (-S: no site-packages)."""
    moved = (REPO_ROOT / "Pulumi.local.yaml").read_text().replace(CONTEXT, "kind-kind")
    (tmp_path / "Pulumi.moved.yaml").write_text(moved)

    def ask(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", "-E", "-m", "cluster.stacks", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )

    local, dev = ask("local"), ask("dev")
    assert (local.returncode, local.stdout, local.stderr) == (0, "cluster\n", "")
    assert (dev.returncode, dev.stdout, dev.stderr) == (0, "", "")
    moved_done = ask("moved", "--dir", str(tmp_path), "--registry-port", "5000")
    assert (moved_done.returncode, moved_done.stdout) == (0, "")
    assert moved_done.stderr.startswith("note: stack moved names the one-machine cluster's")
