"""A job's outcome through the real engine (stack tests/e2e/Pulumi.e2e-outcome.yaml, job.waitFor:
succeeded, restartPolicy ExitCode): `pulumi up` returns when the job succeeds (a), fails within
seconds of the operator's Failed condition naming the pod and its exit code (b), lives through a
pod that exits 143 and is recreated (c), and a labels-only change of a finished job returns
promptly in every wait mode (d); `make status` reports each outcome with its exit code.

kwok's fake nodes run no container: the suite ends each pod with the exit code it chooses by
annotating it, which the Stage in cluster/kwok/pod-exit.yaml turns into a terminated
container, as a kubelet would report it. `pulumi up` runs in a thread meanwhile, as a user's would
in another terminal. The tests run in file order on one stack.
"""

from __future__ import annotations

import calendar
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from builders.job_apis.pytorchjob import API as PYTORCHJOB
from settings.stack import StackSettings
from tests.e2e.conftest import Cluster, Project, Result, Stack, command_status
from tests.support.waiting import wait_until

NAMESPACE = "default"
JOB_TYPE = "kubernetes:kubeflow.org/v1:PyTorchJob"
EXIT_CODE = "pytorch-distributed.test/exit-code"  # read by cluster/kwok/pod-exit.yaml
# How long the operator and kwok may take for a step (a busy 2-core machine: tens of seconds).
STEP_TIMEOUT = 240.0
# From the operator's Failed condition to `pulumi up`'s exit (the issue's bound).
FAIL_FAST_SECONDS = 30
# A labels-only update of a finished job: the engine's own time (program, policy pack,
# provider), never a wait for the job.
PROMPT_SECONDS = 120
WAIT_MODES = ("none", "created", "running", "succeeded")


@pytest.fixture(scope="module", autouse=True)
def fake_nodes(cluster: Cluster) -> None:
    if not cluster.fake_nodes:
        pytest.skip("ends pods with chosen exit codes through kwok's fake nodes")


@pytest.fixture(scope="module")
def stack(project: Project) -> Iterator[Stack]:
    stack = project.stack("e2e-outcome")
    yield stack
    stack.destroy(check=False)


@pytest.fixture(scope="module")
def settings(stack: Stack) -> StackSettings:
    return stack.settings()


@dataclass
class Kube:
    api: Any
    job_name: str

    def __post_init__(self) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def job(self) -> dict[str, Any] | None:
        from kubernetes.client import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                PYTORCHJOB.group, PYTORCHJOB.version, NAMESPACE, PYTORCHJOB.plural, self.job_name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def uid(self) -> str | None:
        job = self.job()
        return None if job is None else str(job["metadata"]["uid"])

    def replaced(self, old_uid: str | None) -> None:
        """Wait until a new job (a spec change replaces it) exists."""
        wait_until(lambda: self.uid() not in (None, old_uid), "the job is replaced", STEP_TIMEOUT)

    def condition(self, kind: str) -> dict[str, Any] | None:
        job = self.job() or {}
        conditions = (job.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)

    def pod(self, replica: str) -> Any | None:
        from kubernetes.client import ApiException

        try:
            return self.core.read_namespaced_pod(f"{self.job_name}-{replica}-0", NAMESPACE)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def running(self, replica: str, *, not_uid: str = "") -> str:
        """Wait until the replica's pod runs (another pod than `not_uid`); its uid."""
        found: list[str] = []

        def runs() -> bool:
            pod = self.pod(replica)
            ok = (
                pod is not None
                and pod.status.phase == "Running"
                and pod.metadata.uid != not_uid
                and pod.metadata.deletion_timestamp is None
            )
            if ok:
                found[:] = [pod.metadata.uid]
            return ok

        wait_until(runs, f"{self.job_name}-{replica}-0 runs", STEP_TIMEOUT)
        return found[0]

    def end(self, replica: str, code: int) -> None:
        """The pod's container exits with `code` (kwok's pod-exit stage)."""
        self.core.patch_namespaced_pod(
            f"{self.job_name}-{replica}-0",
            NAMESPACE,
            {"metadata": {"annotations": {EXIT_CODE: str(code)}}},
        )


@pytest.fixture(scope="module")
def kube(cluster: Cluster, settings: StackSettings) -> Kube:
    return Kube(cluster.api(), settings.job.name)


class Lines:
    """A running command's output, read as it comes (a thread drains the pipe), so a test can
    wait for a line before it acts."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._reader.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self._lines.append(line)

    def wait_for(self, text: str, timeout: float = STEP_TIMEOUT) -> None:
        wait_until(lambda: text in "".join(self._lines), f"{text!r} in the output", timeout)

    def text(self) -> str:
        self._reader.join(timeout=STEP_TIMEOUT)
        return "".join(self._lines)


class Up:
    """`make up` in a thread, as in a second terminal; `result()` waits for it."""

    def __init__(self, stack: Stack) -> None:
        self.ended_at = 0.0
        self._result: Result | None = None
        self._thread = threading.Thread(target=self._run, args=(stack,), daemon=True)
        self._thread.start()

    def _run(self, stack: Stack) -> None:
        try:
            self._result = stack.up(check=False)
        finally:
            self.ended_at = time.time()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout: float = 600) -> Result:
        self._thread.join(timeout)
        assert self._result is not None, "pulumi up did not finish"
        return self._result


def status(stack: Stack) -> subprocess.CompletedProcess[str]:
    """`make status STACK=e2e-outcome`."""
    return stack.status()


def epoch_seconds(timestamp: str) -> float:
    return calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))


def show(title: str, text: str) -> None:
    """Shown with `pytest -s` (the README's examples come from here)."""
    print(f"\n===== {title} =====\n{text}")


# -- a. all pods exit 0: up returns when the job succeeds, status exits 0 ----------------------


def test_up_with_wait_for_succeeded_returns_when_the_job_succeeds(
    project: Project, stack: Stack, kube: Kube
) -> None:
    up = Up(stack)
    kube.running("master")
    kube.running("worker")
    time.sleep(2)
    assert up.running, "pulumi up returned while the job was still running"
    kube.end("worker", 0)
    kube.end("master", 0)
    result = up.result()
    show("make up (a)", result.output)
    assert result.returncode == 0, result.output
    assert result.summary() == {"create": 12}, result.output
    assert kube.condition("Succeeded") is not None
    assert f"PyTorchJob {NAMESPACE}/{kube.job_name} Succeeded" in result.output

    done = status(stack)
    show("make status (a)", done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"PyTorchJob {NAMESPACE}/{kube.job_name}: Succeeded"
    assert any(line.startswith("Succeeded  True") for line in lines), done.stdout
    master_row = next(line for line in lines if line.startswith(f"{kube.job_name}-master-0"))
    assert master_row.split()[1:] == ["Master", "Succeeded", "0", "0", "Completed"]
    assert lines[-1].startswith(f"PyTorchJob {NAMESPACE}/{kube.job_name} succeeded at ")


# -- d. a labels-only change of a finished job is prompt in every wait mode ---------------------


def relabel_in_every_mode(stack: Stack, kube: Kube, outcome: str, modes: tuple[str, ...]) -> None:
    uid = kube.uid()
    for mode in modes:
        stack.config_set("job.waitFor", mode)
        stack.config_set("labels.round", f"{outcome.lower()}-{mode}")
        started = time.monotonic()
        result = stack.up(check=False)
        elapsed = time.monotonic() - started
        assert result.returncode == 0, result.output
        assert result.steps(JOB_TYPE) == ["update"], (mode, result.output)
        assert elapsed < PROMPT_SECONDS, f"waitFor {mode}: {elapsed:.0f}s\n{result.output}"
        if mode in ("running", "succeeded"):  # the hooks saw it finished and did not wait
            assert f"finished earlier ({outcome} at " in result.output, result.output
    assert kube.uid() == uid  # updated in place, never run again
    stack.config_set("job.waitFor", "succeeded")


def test_labels_only_change_of_a_succeeded_job_is_prompt_in_every_wait_mode(
    stack: Stack, kube: Kube
) -> None:
    relabel_in_every_mode(stack, kube, "Succeeded", WAIT_MODES)


# -- b. the master exits 1: up fails within seconds, naming the pod and the exit code -----------


def test_a_master_that_exits_1_fails_up_within_seconds_naming_pod_and_exit_code(
    project: Project, stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    old = kube.uid()
    stack.config_set("job.totalEpochs", str(settings.job.total_epochs + 2))  # a new job
    up = Up(stack)
    kube.replaced(old)
    kube.running("master")
    kube.running("worker")
    kube.end("master", 1)
    result = up.result()
    show("make up (b)", result.output)
    failed = kube.condition("Failed")
    assert failed is not None, kube.job()
    assert result.returncode != 0, result.output
    late = up.ended_at - epoch_seconds(failed["lastTransitionTime"])
    show("pulumi up ended after the Failed condition (b)", f"{late:.1f} s")
    assert late <= FAIL_FAST_SECONDS, f"pulumi up ended {late:.0f}s after the Failed condition"
    master = f"{kube.job_name}-master-0"
    report = [line for line in result.output.splitlines() if master in line]
    assert any("exit code 1 (Error)" in line for line in report), result.output
    assert "PyTorchJobFailed" in result.output
    assert f'job "{kube.job_name}" is failing because "Master" replica(s) failed' in result.output
    assert "Traceback" not in result.output
    # The job exists and is recorded as such: nothing to redo, nothing drifted.
    stack.preview("--expect-no-changes")

    done = status(stack)
    show("make status (b)", done.stdout + done.stderr)
    assert command_status(done) == 1, done.stdout + done.stderr
    assert f"pod {master} (Master): Failed, exit code 1 (Error)" in done.stdout


def test_labels_only_change_of_a_failed_job_is_prompt_and_fails_nothing(
    stack: Stack, kube: Kube
) -> None:
    """The hooked modes: none and created register no hook, as shown on the succeeded job."""
    relabel_in_every_mode(stack, kube, "Failed", ("running", "succeeded"))


# -- c. the worker exits 143 once, then 0: recreated, and the job succeeds ----------------------


def test_a_worker_stopped_by_sigterm_is_recreated_and_the_job_succeeds(
    project: Project, stack: Stack, settings: StackSettings, kube: Kube
) -> None:
    """Also `make status` following the running job to its end: kwok's nodes serve no logs,
    so it follows the job's progress instead and exits with the outcome."""
    old = kube.uid()
    stack.config_set("job.totalEpochs", str(settings.job.total_epochs + 4))  # a new job
    up = Up(stack)
    kube.replaced(old)
    kube.running("master")
    preempted = kube.running("worker")
    with project.popen(
        stack.make_argv("status"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as follower:
        try:
            output = Lines(follower)
            # Only once it follows: a pod ended before `make status` looked finds a finished job.
            output.wait_for(f"(the log of {kube.job_name}-master-0 is not available")
            kube.end("worker", 143)
            recreated = kube.running("worker", not_uid=preempted)
            assert up.running and kube.condition("Failed") is None
            kube.end("worker", 0)
            kube.end("master", 0)
            result = up.result()
            follower.wait(timeout=STEP_TIMEOUT)
            followed = output.text()
        finally:
            follower.kill()  # no-op once it has exited
    show("make up (c)", result.output)
    assert result.returncode == 0, result.output
    assert recreated != preempted
    assert kube.condition("Succeeded") is not None
    # The recreation, as the hook saw it (the failed pod may be gone before it is seen).
    assert f"pod {kube.job_name}-worker-0 was recreated" in result.output, result.output

    show("make status, following (c)", followed)
    assert follower.returncode == 0, followed
    assert f"(the log of {kube.job_name}-master-0 is not available" in followed
    assert followed.splitlines()[-1].startswith(
        f"PyTorchJob {NAMESPACE}/{kube.job_name} succeeded at "
    )
