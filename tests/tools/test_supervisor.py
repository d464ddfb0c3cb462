"""tools.supervisor: PyTorchJob lifecycle semantics over small stand-in replica processes."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from machine.procs import is_alive
from tests.support.waiting import wait_until
from tests.tools.conftest import Job, outcome_of, recorded_pids
from tools.supervisor import JobOutcome, ReplicaCommand, container_exit_code

MASTER = "job-master-0"
WORKER = "job-worker-0"


def wait_for(path: Path, timeout: float = 60) -> None:
    wait_until(path.exists, f"{path} to appear", timeout, interval=0.05)


def assert_nothing_left(job: Job) -> None:
    pids = recorded_pids(job.pid_dir)
    assert pids, "the stand-in replicas recorded no pids"
    survivors = [pid for pid in pids if is_alive(pid)]
    assert survivors == [], f"processes outlived the job: {survivors}"


def test_output_is_prefixed_with_the_pod_name(make_job: Callable[..., Job]) -> None:
    job = make_job(backoff_limit=3)
    job.add(MASTER, "--sleep", "0.2")
    job.add(WORKER, "--sleep", "0.1")

    result = job.run()

    assert f"[{MASTER}] {MASTER} run 1 started" in result.stdout
    assert f"[{WORKER}] {WORKER} run 1 started" in result.stdout
    assert result.returncode == 0, result.stdout


def test_failed_replica_is_restarted_until_it_succeeds(make_job: Callable[..., Job]) -> None:
    job = make_job(backoff_limit=3)
    job.add(MASTER, "--fail-runs", "2")

    result = job.run()

    outcome = outcome_of(result)
    assert result.returncode == 0, result.stdout
    assert outcome["status"] == "Succeeded"
    assert job.runs(MASTER) == 3  # two failures, each restarted, then a clean exit
    assert outcome["restarts"] == {MASTER: 2}
    assert f"{MASTER} exited with code 1; restarting it" in result.stdout


def test_a_failed_replica_comes_back_only_with_its_whole_group(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=3)
    job.add(MASTER, "--forever-runs", "1", "--sleep", "1")  # never fails by itself
    job.add(WORKER, "--fail-runs", "1", "--sleep", "0.5", "--forever-runs", "2")

    result = job.run()

    out = result.stdout
    outcome = outcome_of(result)
    assert result.returncode == 0, out
    assert outcome["restarts"] == {MASTER: 1, WORKER: 1}
    assert f"stopping {MASTER} so the group can re-form" in out
    # The worker's second run starts only after the lingering master of the first group ended.
    assert out.index(f"{MASTER} got SIGTERM") < out.index(f"{WORKER} run 2 started")
    assert job.runs(MASTER) == 2
    assert_nothing_left(job)


def test_master_failing_past_the_backoff_limit_fails_the_job(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=2)
    job.add(MASTER, "--exit", "3", "--grandchild")

    result = job.run()

    outcome = outcome_of(result)
    assert result.returncode != 0
    assert outcome["status"] == "Failed"
    assert "backoffLimit 2" in outcome["reason"]
    # The operator fails the job once the summed restart count reaches backoffLimit: the first
    # failure is restarted (count 1), the second one reaches 2 and ends the job.
    assert job.runs(MASTER) == 2
    assert_nothing_left(job)


def test_restarts_of_all_replicas_share_one_backoff_count(make_job: Callable[..., Job]) -> None:
    job = make_job(backoff_limit=3)
    job.add(MASTER, "--fail-runs", "1", "--sleep", "0.5", "--forever-runs", "2")
    job.add(WORKER, "--fail-runs", "2", "--sleep", "0.5", "--forever-runs", "3")

    result = job.run()

    outcome = outcome_of(result)
    assert result.returncode != 0
    assert outcome["status"] == "Failed"
    # 1 master + 2 worker failures: the third restart in the job reaches backoffLimit 3.
    assert sum(outcome["restarts"].values()) == 3
    assert outcome["restarts"][WORKER] == 2
    assert_nothing_left(job)


def test_backoff_limit_zero_fails_on_the_first_failure(make_job: Callable[..., Job]) -> None:
    job = make_job(backoff_limit=0)
    job.add(MASTER, "--exit", "1")

    result = job.run()

    assert result.returncode != 0
    assert outcome_of(result)["status"] == "Failed"
    assert job.runs(MASTER) == 1


def test_a_failed_job_names_the_failing_replica_and_its_last_error_line(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=0)
    # The master fails only once the worker has said its line, however busy the machine is.
    job.add(
        MASTER,
        *("--say", "error: the first try", "--say", "error: the reason"),
        *("--after", WORKER, "--exit", "2"),
    )
    job.add(WORKER, "--forever", "--say", "ValueError: a later line, from another replica")

    outcome = outcome_of(job.run())

    assert outcome["status"] == "Failed" and outcome["failed_replica"] == MASTER
    assert outcome["last_errors"][MASTER] == "error: the reason"
    assert outcome["last_errors"][WORKER] == "ValueError: a later line, from another replica"


def test_without_an_error_line_of_its_own_the_latest_of_any_replica_is_quoted() -> None:
    """Rank 0 states a refusal once; the worker pod that failed first printed none."""
    outcome = JobOutcome(
        status="Failed",
        reason="...",
        restarts={},
        exit_code=1,
        failed_replica=WORKER,
        last_errors={MASTER: "error: refusing to start: ..."},
    )
    assert outcome.last_error() == (MASTER, "error: refusing to start: ...")
    outcome.last_errors[WORKER] = "error: its own"
    assert outcome.last_error() == (WORKER, "error: its own")


def test_restart_policy_never_fails_without_restarting(make_job: Callable[..., Job]) -> None:
    job = make_job(backoff_limit=5)
    job.add(MASTER, "--forever")
    job.add(WORKER, "--exit", "2", restart_policy="Never")

    result = job.run()

    outcome = outcome_of(result)
    assert result.returncode != 0
    assert outcome["status"] == "Failed"
    assert "exit code 2" in outcome["reason"]
    assert job.runs(WORKER) == 1
    assert_nothing_left(job)


def test_exit_code_policy_recreates_signalled_pods_outside_the_backoff_count(
    make_job: Callable[..., Job],
) -> None:
    # Under the operator, ExitCode pods run with restartPolicy Never; a retryable exit (128-255)
    # makes it delete and recreate the pod, whose restart count starts at 0 again.
    job = make_job(backoff_limit=1)
    job.add(MASTER, "--fail-runs", "3", "--fail-code", "137", restart_policy="ExitCode")

    result = job.run()

    outcome = outcome_of(result)
    assert outcome["status"] == "Succeeded", result.stdout
    assert job.runs(MASTER) == 4
    assert outcome["recreations"][MASTER] == 3
    assert outcome["restarts"][MASTER] == 0  # never reached backoffLimit 1


def test_exit_code_policy_fails_the_job_on_a_non_retryable_code(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=5)
    job.add(MASTER, "--exit", "3", restart_policy="ExitCode")

    result = job.run()

    outcome = outcome_of(result)
    assert result.returncode != 0
    assert outcome["status"] == "Failed"
    assert "exit code 3, which restartPolicy ExitCode does not retry" in outcome["reason"]
    assert job.runs(MASTER) == 1


def test_killed_process_group_is_restarted(make_job: Callable[..., Job]) -> None:
    job = make_job(backoff_limit=3)
    job.add(MASTER, "--forever-runs", "1", "--sleep", "1")
    job.add(WORKER, "--forever", "--grandchild")
    runner = job.start()
    try:
        wait_for(job.pid_dir / f"{WORKER}.ready")
        pid_file = job.runner_pid_dir / f"{WORKER}.pid"
        wait_for(pid_file)
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        out, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, out
    assert job.runs(WORKER) == 2
    assert f"{WORKER} exited with code 137; restarting it" in out
    assert_nothing_left(job)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_is_forwarded_and_leaves_no_process_behind(
    make_job: Callable[..., Job], sig: signal.Signals
) -> None:
    job = make_job(backoff_limit=3, grace_seconds=20)
    job.add(MASTER, "--forever", "--grandchild")
    job.add(WORKER, "--forever", "--escapee")
    runner = job.start()
    try:
        wait_for(job.pid_dir / f"{MASTER}.ready")
        wait_for(job.pid_dir / f"{WORKER}.ready")
        runner.send_signal(sig)
        out, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 128 + sig
    assert f"{MASTER} got SIGTERM" in out  # forwarded like a pod deletion, not just killed
    assert f"{WORKER} got SIGTERM" in out
    outcome = json.loads(out.splitlines()[-1].removeprefix("OUTCOME "))
    assert outcome["status"] == "Interrupted" and outcome["signal_name"] == sig.name
    assert outcome["exit_codes"] == {MASTER: 143, WORKER: 143}  # the stand-ins' stop code
    assert_nothing_left(job)


def test_replica_ignoring_sigterm_is_killed_after_the_grace_period(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=3, grace_seconds=1)
    job.add(MASTER, "--forever", "--ignore-term", "--grandchild")
    runner = job.start()
    try:
        wait_for(job.pid_dir / f"{MASTER}.ready")
        runner.send_signal(signal.SIGINT)
        out, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    # Signalled once (a pod deletion sends one SIGTERM), then killed after the grace period.
    assert out.count(f"[{MASTER}] {MASTER} got SIGTERM") == 1, out
    assert f"killing {MASTER}" in out
    assert runner.returncode == 128 + signal.SIGINT
    assert_nothing_left(job)


def test_workers_still_running_after_the_master_succeeds_are_stopped(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=3, grace_seconds=1)
    job.add(MASTER, "--sleep", "0.5")
    job.add(WORKER, "--forever", "--grandchild")

    result = job.run()

    assert result.returncode == 0, result.stdout
    assert outcome_of(result)["status"] == "Succeeded"
    assert f"{WORKER} got SIGTERM" in result.stdout
    assert_nothing_left(job)


def test_signal_deaths_read_as_container_exit_codes() -> None:
    assert container_exit_code(-9) == 137
    assert container_exit_code(-15) == 143
    assert container_exit_code(2) == 2


def test_unknown_restart_policy_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="restartPolicy of job-master-0 is 'Sometimes'"):
        ReplicaCommand(name=MASTER, argv=["true"], env={}, cwd=tmp_path, restart_policy="Sometimes")


def test_replicas_are_terminated_when_the_supervisor_itself_is_killed(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=3)
    job.add(MASTER, "--forever")
    job.add(WORKER, "--forever")
    runner = job.start()
    try:
        wait_for(job.pid_dir / f"{MASTER}.ready")
        wait_for(job.pid_dir / f"{WORKER}.ready")
        runner.kill()  # SIGKILL: the supervisor gets no chance to clean up
        runner.communicate(timeout=60)
        wait_until(
            lambda: not any(is_alive(pid) for pid in recorded_pids(job.pid_dir)),
            "the replicas of the killed supervisor to exit",
            30,
            interval=0.1,
        )
    finally:
        if runner.poll() is None:
            runner.kill()
    assert_nothing_left(job)
