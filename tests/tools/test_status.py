"""tools.status (`make status`) without a cluster: which job and cluster it reads from the stack,
and how it ends when there is nothing to show. With a cluster: tests/e2e/test_job_outcome.py."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import yaml

from readers.job_state import job_state
from tests.conftest import REPO_ROOT
from tools.status import NOT_FOUND, RUNNING, main, outcome_code


def test_a_missing_stack_file_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--stack", "nope", "--stack-dir", str(tmp_path)], out=io.StringIO()) == NOT_FOUND
    err = capsys.readouterr().err
    # The settings' own words (settings/stack.py), as every tool says them.
    assert err.startswith("error: stack 'nope': no stack file "), err
    assert len(err.strip().splitlines()) == 1


def test_the_stack_context_is_looked_up_in_the_kubeconfig_of_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The namespace, job and context come from the stack file; the kubeconfig from KUBECONFIG,
    as the stack's Kubernetes provider reads it. A context the kubeconfig lacks is named."""
    shutil.copy(REPO_ROOT / "Pulumi.dev.yaml", tmp_path / "Pulumi.dev.yaml")
    stack = yaml.safe_load((tmp_path / "Pulumi.dev.yaml").read_text())
    stack["config"]["pytorch-distributed:kubeContext"] = "team-cluster"
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "other", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "other", "context": {"cluster": "other", "user": "me"}}],
                "current-context": "other",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))

    code = main(["--stack", "dev", "--stack-dir", str(tmp_path)], out=io.StringIO())

    assert code == NOT_FOUND
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot load context 'team-cluster' of kubeconfig {kubeconfig}")
    assert len(err.splitlines()) == 1


def test_exit_code_is_the_outcome() -> None:
    def with_condition(kind: str) -> dict[str, object]:
        condition = {"type": kind, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        return {"metadata": {"name": "j"}, "status": {"conditions": [condition]}}

    assert outcome_code(job_state(with_condition("Succeeded"), [])) == 0
    assert outcome_code(job_state(with_condition("Failed"), [])) == 1
    assert outcome_code(job_state(with_condition("Running"), [])) == RUNNING


def test_no_kubeconfig_is_one_line_naming_kubeconfig_and_make_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert main(["--stack", "dev"], out=io.StringIO()) == NOT_FOUND
    assert capsys.readouterr().err == (
        f"error: no kubeconfig at {tmp_path / 'none'}: set KUBECONFIG to your cluster's (or, "
        "for the one-machine cluster, kubeContext: pytorch-distributed-local in the stack, as "
        "Pulumi.local.yaml has)\n"
    )


def test_an_unreachable_api_server_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "me"}}],
                "current-context": "gone",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert main(["--stack", "dev"], out=io.StringIO()) == NOT_FOUND
    assert capsys.readouterr().err == (
        f"error: the Kubernetes API server https://127.0.0.1:1 (kubeconfig {kubeconfig}) cannot "
        "be reached: connection refused; is the cluster up, and KUBECONFIG its kubeconfig? (or, "
        "for the one-machine cluster, kubeContext: pytorch-distributed-local in the stack, as "
        "Pulumi.local.yaml has)\n"
    )
