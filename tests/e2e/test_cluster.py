"""The one-machine cluster as a user drives it, in the suite's checkout (tools/cluster/): `make
cluster` returns once everything answers and leaves it running in the background (the make that
started it is gone), a second `make cluster` says it is up, `make cluster-status` sees every part
answer (Kueue's LocalQueue `local` active among them), and `make cluster-down` leaves no
process, mount (the real node's network and mount namespaces are held by mounts) or cgroup of it.
Its registry takes a free port here (`CLUSTER_REGISTRY_PORT`), so a user's own cluster on 5000
may run meanwhile."""

from __future__ import annotations

import os

import pytest

from tests.e2e.conftest import Project, command_status
from tools import procs
from tools.cluster.service import TAG, ClusterDir, leftovers, mounts_under, running
from tools.ports import free_port

pytestmark = pytest.mark.timeout(1200)


def test_make_cluster_runs_in_the_background_once_and_cluster_down_leaves_nothing(
    project: Project,
) -> None:
    if os.environ.get("PD_E2E_KUBECONFIG"):
        pytest.skip("an external cluster: the one-machine cluster's binaries are not built")
    port = str(free_port())
    directory = ClusterDir(project.work_dir / ".cluster")
    try:
        started = project.make("cluster", CLUSTER_REGISTRY_PORT=port)
        assert "the one-machine cluster is up" in started.stdout, started.stdout
        current = running(directory)
        assert current is not None, (directory.path / "cluster.log").read_text()
        assert current.registry == f"127.0.0.1:{port}"
        # The make that started it has exited; the supervisor and its components run on.
        assert procs.is_alive(current.supervisor)
        assert len(procs.tagged(TAG, directory.tag)) >= 10, "plane, node, registry, Docker API"
        assert f"export KUBECONFIG={current.kubeconfig} " in started.stdout

        again = project.make("cluster", CLUSTER_REGISTRY_PORT=port)
        assert "the one-machine cluster was already up" in again.stdout, again.stdout
        assert running(directory) == current

        status = project.make("cluster-status")
        parts = [line.split(None, 1) for line in status.stdout.splitlines()[1:6]]
        assert [state for state, _ in parts] == ["ok"] * 5, status.stdout
        assert parts[4][1].startswith("Kueue, LocalQueue local"), status.stdout
    finally:
        down = project.make("cluster-down", check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "the one-machine cluster is down: no process, mount" in down.stdout, down.stdout
    assert leftovers(directory) == []
    assert procs.tagged(TAG, directory.tag) == []
    assert mounts_under(directory.path) == []

    gone = project.make("cluster-status", check=False)
    assert command_status(gone) == 1
    assert "the one-machine cluster is not running: `make cluster` starts it" in gone.stdout
