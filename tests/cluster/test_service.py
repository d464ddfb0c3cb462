"""cluster/service.py and `python -m cluster` without starting a cluster: where its
state lives, what a command run on it gets, what it says when it is not running or cannot run
here, the providers it installs. The cluster itself, started and stopped:
tests/e2e/test_cluster.py."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from cluster import __main__ as cli
from cluster import service
from cluster.service import ClusterDir, Running, install_providers, provider_versions
from tests.conftest import REPO_ROOT

RUNNING = Running(
    supervisor=4242,
    kubeconfig="/clone/.cluster/plane/kubeconfig",
    server="https://127.0.0.1:6443",
    registry="127.0.0.1:5000",
    registry_user="local-robot",
    registry_password_file="/clone/.cluster/registry-password",
    docker_host="unix:///clone/.cluster/podman.sock",
    bin_dir="/cache/sets/abc/bin",
)


def test_a_directorys_cluster_is_known_by_a_tag_of_its_path(tmp_path: Path) -> None:
    one, other = ClusterDir(tmp_path / "a"), ClusterDir(tmp_path / "b")
    assert one.tag == ClusterDir(tmp_path / "a").tag != other.tag
    assert one.cgroup == f"pytorch-distributed-cluster-{one.tag[:8]}"
    assert one.relative(REPO_ROOT / ".cluster" / "cluster.log") == ".cluster/cluster.log"
    assert one.relative(tmp_path / "x") == str(tmp_path / "x")


def test_a_command_on_the_cluster_gets_its_kubeconfig_engine_tools_and_password() -> None:
    env = RUNNING.environment({"PATH": "/usr/bin:/bin", "HOME": "/root", "KUBECONFIG": "/mine"})
    assert env == {
        "HOME": "/root",
        "KUBECONFIG": "/clone/.cluster/plane/kubeconfig",
        "DOCKER_HOST": "unix:///clone/.cluster/podman.sock",
        "PATH": "/cache/sets/abc/bin:/usr/bin:/bin",
        "CLUSTER_REGISTRY_PASSWORD_FILE": "/clone/.cluster/registry-password",
    }
    assert RUNNING.exports() == (
        "export KUBECONFIG=/clone/.cluster/plane/kubeconfig "
        'DOCKER_HOST=unix:///clone/.cluster/podman.sock PATH="/cache/sets/abc/bin:$PATH"'
    )


def test_the_registry_password_is_made_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    directory = ClusterDir(tmp_path / ".cluster")
    first = service.registry_password(directory)
    assert len(first) >= 20
    assert stat.S_IMODE(directory.registry_password.stat().st_mode) == 0o600
    assert service.registry_password(directory) == first


def test_the_providers_are_the_sdk_pins() -> None:
    pins = (REPO_ROOT / "requirements.txt").read_text()
    versions = provider_versions()
    assert set(versions) == {"kubernetes", "docker"}
    for package, version in versions.items():
        assert f"pulumi-{package}=={version}\n" in pins


def test_providers_missing_from_the_cli_are_installed_from_the_built_files(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "set" / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls"
    installed = [
        {"kind": "resource", "name": "kubernetes", "version": provider_versions()["kubernetes"]}
    ]
    stand_in = bin_dir / "pulumi"
    stand_in.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        f"print(json.dumps({installed!r}) if sys.argv[1:3] == ['plugin', 'ls'] else '')\n"
    )
    stand_in.chmod(0o755)

    install_providers(bin_dir, dict(os.environ))

    docker = provider_versions()["docker"]
    assert calls.read_text().splitlines() == [
        "plugin ls --json",
        f"plugin install resource docker {docker} --file "
        f"{tmp_path / 'set' / 'providers' / 'pulumi-resource-docker'}",
    ]


def run_cli(*args: str, directory: Path) -> int:
    return cli.main(["--dir", str(directory), *args])


def test_elsewhere_one_line_says_what_is_missing_and_points_to_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "unsupported", lambda: "Linux (this is darwin)")
    for command in (["up"], ["run", "--", "true"]):
        assert run_cli(*command, directory=tmp_path / ".cluster") == 2
        assert capsys.readouterr().err == (
            "error: the one-machine cluster needs Linux (this is darwin); scripts/kind-up.sh "
            "starts a kind cluster (Docker) for `make up STACK=dev` instead\n"
        )
    assert not (tmp_path / ".cluster").exists()


def test_a_cluster_that_is_not_running_is_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / ".cluster"
    assert run_cli("status", directory=directory) == 1
    assert capsys.readouterr().out == (
        "the one-machine cluster is not running: `make cluster` starts it\n"
    )
    assert run_cli("env", directory=directory) == 1
    assert capsys.readouterr().err == "the one-machine cluster is not running: `make cluster`\n"
    # make status|checkpoint of a stack of the cluster: never start it, one line.
    assert run_cli("run", "--no-start", "--", "true", directory=directory) == 2
    assert capsys.readouterr().err == (
        "error: the one-machine cluster is not running: `make cluster` (or `make up` of the "
        "stack) starts it\n"
    )


def test_down_of_a_cluster_that_is_not_running_finds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("down", directory=tmp_path / ".cluster") == 0
    assert capsys.readouterr().out == (
        "the one-machine cluster is not running; nothing of it is left\n"
    )


def test_ready_json_of_a_gone_supervisor_is_not_a_running_cluster(tmp_path: Path) -> None:
    directory = ClusterDir(tmp_path / ".cluster")
    directory.path.mkdir()
    directory.ready.write_text(json.dumps(RUNNING.__dict__))
    directory.pid_file.write_text(f"{os.getpid()}\n")  # alive, but not this directory's
    assert service.running(directory) is None


def test_tools_only_runs_the_command_with_the_clusters_cli_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make config` of a stack of the cluster: its Pulumi CLI on PATH, running or not (even
    where the cluster itself cannot run), and nothing else of it."""
    bin_dir = tmp_path / "tools" / "bin"
    executed: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(cli, "ensure_tools", lambda: bin_dir)
    monkeypatch.setattr(service, "unsupported", lambda: "Linux (this is darwin)")

    def replaced(file: str, argv: list[str], env: dict[str, str]) -> None:
        executed.append((file, list(argv), dict(env)))
        raise SystemExit(0)  # the process is the command's now: nothing after it runs

    monkeypatch.setattr(os, "execvpe", replaced)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    directory = tmp_path / ".cluster"
    with pytest.raises(SystemExit):
        run_cli("run", "--tools-only", "--", "pulumi", "config", directory=directory)
    [(file, argv, env)] = executed
    assert (file, argv) == ("pulumi", ["pulumi", "config"])
    assert env["PATH"] == f"{bin_dir}:/usr/bin:/bin"
    assert "KUBECONFIG" not in env and "CLUSTER_REGISTRY_PASSWORD_FILE" not in env
    assert not directory.exists()


def test_a_port_taken_before_its_component_bound_it_is_told_from_other_failures() -> None:
    etcd = (
        "error: etcd exited (1) before health:\n"
        '{"level":"fatal","msg":"listener failed","error":"listen tcp 127.0.0.1:40031: bind: '
        'address already in use"}'
    )
    registry = "error: listen tcp 127.0.0.1:5000: bind: address already in use"
    assert service.chosen_port_taken(etcd, 5000)
    assert not service.chosen_port_taken(registry, 5000)  # the user's port: again is no better
    assert service.chosen_port_taken(registry.replace(":5000", ":50001"), 5000)
    assert not service.chosen_port_taken("error: kube-apiserver exited (1) before /readyz", 5000)


def test_a_start_whose_port_was_taken_starts_again_once_on_other_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = ClusterDir(tmp_path / ".cluster")
    starts: list[bool] = []

    def start(directory: ClusterDir, registry_port: int) -> Running:
        starts.append(directory.plane.exists())
        directory.plane.mkdir(parents=True)  # what a failed start leaves
        if len(starts) < 3:
            raise service.PortTakenError("a port of the cluster was taken before it was bound: x")
        return RUNNING

    for name, value in (
        ("unsupported_here", lambda: None),
        ("ensure_tools", lambda: tmp_path),
        ("ensure_base_image", lambda: None),
        ("install_providers", lambda bin_dir, env: None),
        ("start_supervisor", start),
    ):
        monkeypatch.setattr(service, name, value)
    with pytest.raises(service.ClusterError, match="taken before it was bound: x"):
        service.up(directory, 5000)
    assert starts == [False, False]  # the second on a fresh plane directory
    assert "starting again on other ports" in capsys.readouterr().err
    starts.clear()
    starts.append(False)  # now the second start succeeds
    assert service.up(directory, 5000) == (RUNNING, True)
