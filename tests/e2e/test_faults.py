"""Faults in the middle of `make up` and `make destroy`, through the real CLI: each is caused at a
random moment of the window where it matters (at least one object exists, the command has not
ended), then the next `make up` (or `make destroy`) must succeed with nothing pending, exactly
the stack's objects in the cluster (none made twice, none left unmanaged), the retained claim
with its UID and its data, and nothing left for a preview to change. The tests share one stack
and its claim; each first brings the stack to the state it starts from (deployed or destroyed).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator

import pytest

from builders.manifests import resource_names
from settings.stack import PROJECT
from tests.e2e.conftest import Cluster, Project, Stack
from tests.e2e.faults import (
    CLAIM_TYPE,
    JOB_TYPE,
    SECRET_TYPE,
    SEED,
    Claim,
    Kube,
    Moment,
    Running,
    any_object_done,
    assert_recovered,
    began,
    ensure_deployed,
    ensure_destroyed,
    explained,
    exported,
    finished,
    pending_after_a_kill,
    seeded,
    state_dir,
)
from tools.pulumi_run import StackLock, file_backend_dir, stack_lock_dir
from tools.pulumi_run import stack_locks as stack_locks_in

pytestmark = pytest.mark.timeout(900)

# Where an update of this stack can be cut: once the first object exists, once the claim does,
# or once the job's create began (it then waits for the pods to run, a second or more on kwok).
UPDATE_MOMENTS = (
    Moment("the first object was made", any_object_done, 0.3),
    Moment("the claim was made", finished(CLAIM_TYPE), 0.3),
    Moment("the job's create began", began(JOB_TYPE, "create"), 0.2),
)


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster)


@pytest.fixture(scope="module")
def stack(project: Project, kube: Kube) -> Iterator[Stack]:
    # What `make` passes the script: the project's .venv, which has psutil (a killed CLI's
    # zombie is told from a live one).
    stack = project.stack("e2e-faults")
    yield stack
    stack.destroy(check=False)
    from kubernetes import client

    try:
        kube.core.delete_namespaced_persistent_volume_claim(
            resource_names(stack.settings()).claim, "default"
        )
    except client.ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture(scope="module")
def claim(stack: Stack, cluster: Cluster, kube: Kube) -> Claim:
    """The stack deployed once and a checkpoint file on its claim: the claim every test keeps."""
    stack.up()
    return Claim.mark(kube, cluster, resource_names(stack.settings()).claim, "epoch 2\n")


def test_a_killed_destroy_is_recovered_by_the_next_destroy(
    stack: Stack, kube: Kube, claim: Claim, request: pytest.FixtureRequest
) -> None:
    ensure_deployed(stack)
    # The job goes first (it uses the secret and the claim) and destroy waits until it is gone;
    # the secret's delete after it is over in a blink. The job's delete is held in progress
    # until the kill (on an idle machine it can end within the moment's delay).
    with kube.job_deletion_held(stack.settings().job.name):
        running = Running.start(stack, "destroy")
        moment = running.at_random(
            seeded(request.node.name),
            [Moment("the job's delete began", began(JOB_TYPE, "delete"), 1.0)],
        )
        running.kill()
    names = resource_names(stack.settings())
    survivors = kube.uids(names.job)

    result = stack.destroy()

    notes = "\n".join(explained(result))
    assert "was left locked by a pulumi command that is no longer running" in notes, notes
    kube.wait_until_gone(names.job, [JOB_TYPE, SECRET_TYPE])
    assert_recovered(
        stack, kube, claim, deployed=False, survivors=survivors, context=f"killed {moment}"
    )


def test_a_killed_up_is_recovered_by_the_next_up(
    stack: Stack, kube: Kube, claim: Claim, request: pytest.FixtureRequest
) -> None:
    ensure_destroyed(stack)
    running = Running.start(stack, "up")
    moment = running.at_random(seeded(request.node.name), UPDATE_MOMENTS)
    running.kill()
    names = resource_names(stack.settings())
    survivors = kube.uids(names.job)
    pending = pending_after_a_kill(stack)

    result = stack.up()

    notes = "\n".join(explained(result))
    assert "was left locked by a pulumi command that is no longer running" in notes, notes
    if pending:
        assert "refreshing the state from the cluster and clearing them first" in notes, notes
    assert_recovered(
        stack, kube, claim, deployed=True, survivors=survivors, context=f"killed {moment}"
    )


def test_after_an_adopted_object_a_change_applies_without_a_conflict(
    stack: Stack, kube: Kube, claim: Claim
) -> None:
    """The objects adopted above (the retained claim on every up after a destroy, the job when
    its create was cut) are applied under the field manager that made them: changing a label
    they already carry must not meet a conflict with a manager that is gone."""
    ensure_deployed(stack)
    names = resource_names(stack.settings())
    assert stack.settings().labels == {"team": "faults"}
    stack.config_set("labels.team", "faults-changed")
    try:
        stack.up()
        objects = kube.objects(names.job)
        assert {o.type for o in objects} == {SECRET_TYPE, CLAIM_TYPE, JOB_TYPE}
        for found in objects:
            assert kube_labels(kube, found.type, found.name)["team"] == "faults-changed", found
    finally:
        stack.config_set("labels.team", "faults")
    stack.up()


def kube_labels(kube: Kube, resource_type: str, name: str) -> dict[str, str]:
    if resource_type == JOB_TYPE:
        job = kube.custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", name
        )
        return job["metadata"].get("labels") or {}
    reader = {
        SECRET_TYPE: kube.core.read_namespaced_secret,
        CLAIM_TYPE: kube.core.read_namespaced_persistent_volume_claim,
    }[resource_type]
    return reader(name, "default").metadata.labels or {}


def test_a_running_command_keeps_its_lock(stack: Stack, kube: Kube, claim: Claim) -> None:
    """A second `make up` while one runs stops with a clear line and removes nothing; a preview
    still runs; the first command then finishes normally."""
    ensure_deployed(stack)
    stack.config_set("labels.team", "faults-locks")
    running = Running.start(stack, "up")
    try:
        running.wait_for("the update's first step", began("pulumi:pulumi:Stack"))
        cli = running.cli_process()
        cli.suspend()
        try:
            second = stack.up(check=False)
            preview = stack.preview()
            held = [lock.pid for lock in stack_locks(stack)]
        finally:
            cli.resume()
        first = running.result(timeout=300)
    finally:
        stack.config_set("labels.team", "faults")
    assert second.status == 1, second.output
    assert any(
        f"locked by a pulumi command that is still running (pid {cli.pid}" in line
        for line in explained(second)
    ), second.output
    assert any("is still running" in line for line in explained(preview)), preview.output
    assert held == [cli.pid], "the running command's lock was touched"
    assert first.returncode == 0, first.output
    assert stack_locks(stack) == []
    stack.up()
    assert exported(stack).get("pending_operations") in (None, [])


def stack_locks(stack: Stack) -> list[StackLock]:
    """The stack's locks in the suite's file backend, read as tools/pulumi_run.py reads them."""
    backend = file_backend_dir(stack.project.variables["PULUMI_BACKEND_URL"])
    assert backend is not None
    return stack_locks_in(stack_lock_dir(backend, PROJECT, stack.name))


def test_a_state_save_torn_by_a_kill_is_read_again(stack: Stack) -> None:
    """A command killed while the backend saved the state (between writing the empty metadata
    file in place and renaming the new state into place) leaves `<stack>.json.attrs` empty, and
    the CLI then reads no state at all; the next command removes that file and goes on from the
    state saved before. The torn save is made here by hand (the kill that makes it is a moment
    of a few microseconds)."""
    ensure_deployed(stack)
    metadata = state_dir(stack) / f"{stack.name}.json.attrs"
    assert metadata.stat().st_size > 0
    saved = exported(stack)
    metadata.write_text("")

    torn = stack.cli("stack", "export", check=False)
    assert torn.returncode != 0
    assert "failed to load checkpoint: EOF" in torn.stderr, torn.stderr

    result = stack.preview()
    assert any(f"removed {metadata}, the empty metadata file" in line for line in explained(result))
    assert exported(stack) == saved


def test_destroy_after_a_killed_up_leaves_nothing_unmanaged(
    stack: Stack, kube: Kube, claim: Claim, request: pytest.FixtureRequest
) -> None:
    ensure_destroyed(stack)
    running = Running.start(stack, "up")
    moment = running.at_random(seeded(request.node.name), UPDATE_MOMENTS)
    running.kill()
    names = resource_names(stack.settings())
    survivors = kube.uids(names.job)
    pending = pending_after_a_kill(stack)

    result = stack.destroy()

    notes = "\n".join(explained(result))
    assert "was left locked by a pulumi command that is no longer running" in notes, notes
    if pending:
        assert "importing the objects it was creating" in notes, notes
    kube.wait_until_gone(names.job, [JOB_TYPE, SECRET_TYPE])
    assert_recovered(
        stack, kube, claim, deployed=False, survivors=survivors, context=f"killed {moment}"
    )


def test_the_api_server_down_during_up(
    stack: Stack, cluster: Cluster, kube: Kube, claim: Claim, request: pytest.FixtureRequest
) -> None:
    if cluster.plane is None:
        pytest.skip("stopping the API server needs the suite's own control plane")
    ensure_destroyed(stack)
    rng = seeded(request.node.name)
    running = Running.start(stack, "up")
    moment = running.at_random(rng, UPDATE_MOMENTS)
    names = resource_names(stack.settings())
    survivors = kube.uids(names.job)
    cluster.plane.stop_apiserver()
    try:
        # A create in flight fails at once; the wait for the job's pods retries instead, and
        # the user, seeing nothing move, stops it with Ctrl-C.
        _wait_quietly(running, rng.uniform(2, 5))
        if running.popen.poll() is None:
            running.interrupt()
        first = running.result(timeout=300)
        assert first.returncode != 0, first.output
        assert explained(first), first.output
        # The next `make up` while the server is still down: one line that names it. Unless
        # the interrupted one had recorded every object already (stopped in the job's wait):
        # then nothing is left to change, and the provider does not ask the server.
        down = stack.up(check=False)
        if down.returncode == 0:
            assert set(down.summary()) == {"same"}, down.output
        else:
            lines = explained(down)
            assert any(
                "Kubernetes API server" in line and "could not be reached" in line for line in lines
            ), down.output
    finally:
        cluster.plane.start_apiserver()

    stack.up()

    assert_recovered(
        stack,
        kube,
        claim,
        deployed=True,
        survivors=survivors,
        context=f"API server down {moment}",
    )


def _wait_quietly(running: Running, seconds: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        running.popen.wait(timeout=seconds)


def test_the_training_operator_down_while_the_job_is_created(
    stack: Stack, cluster: Cluster, kube: Kube, claim: Claim, request: pytest.FixtureRequest
) -> None:
    if cluster.plane is None:
        pytest.skip("stopping the training operator needs the suite's own control plane")
    ensure_destroyed(stack)
    rng = seeded(request.node.name)
    names = resource_names(stack.settings())
    cluster.plane.stop_operator()
    try:
        running = Running.start(stack, "up")
        running.wait_for("the job's create", began(JOB_TYPE, "create"))
        # The job is stored and `up` waits for pods that nothing makes: the user stops it.
        kube.wait_for(names.job, JOB_TYPE)
        delay = rng.uniform(0, 3.0)
        time.sleep(delay)
        moment = f"{delay:.2f}s after the job was stored (seed {SEED})"
        assert not running.ended(), f"up ended with the operator down, {moment}"
        survivors = kube.uids(names.job)
        running.interrupt()
        first = running.result(timeout=300)
        assert first.returncode != 0, first.output
        assert any("interrupted" in line for line in explained(first)), first.output
    finally:
        cluster.plane.start_operator()

    stack.up()

    assert_recovered(
        stack,
        kube,
        claim,
        deployed=True,
        survivors=survivors,
        context=f"operator down, Ctrl-C {moment}",
    )
