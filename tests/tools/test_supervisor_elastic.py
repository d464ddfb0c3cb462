"""tools.supervisor for an elastic job (the operator's elasticPolicy): a failed replica comes back
alone while its peers go on, any replica's success is the job's, and a pod whose hold file
exists stays pending until it is removed."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.tools.conftest import Job, outcome_of
from tools.supervisor import HOLD_SUFFIX

FIRST = "job-worker-0"
SECOND = "job-worker-1"


def test_a_failed_replica_is_restarted_alone_while_its_peer_goes_on(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=3, success_replica=FIRST, elastic=True)
    job.add(FIRST, "--sleep", "3")
    job.add(SECOND, "--fail-runs", "1", "--sleep", "0.3")

    result = job.run()

    out = result.stdout
    outcome = outcome_of(result)
    assert result.returncode == 0, out
    assert outcome["status"] == "Succeeded"
    assert outcome["restarts"] == {FIRST: 0, SECOND: 1}
    # The second pod's new run starts while the first still runs its only one: no regrouping.
    assert out.index(f"{SECOND} run 2 started") < out.index(f"{FIRST} run 1 exits 0"), out
    assert "so the group can re-form" not in out and f"{FIRST} got SIGTERM" not in out
    assert f"restarting {SECOND}; it joins the next rendezvous" in out
    assert job.runs(FIRST) == 1


def test_a_held_pod_stays_pending_until_its_hold_file_is_removed(
    make_job: Callable[..., Job],
) -> None:
    job = make_job(backoff_limit=3, success_replica=FIRST, elastic=True, grace_seconds=2)
    job.add(FIRST, "--forever")
    job.add(SECOND, "--fail-runs", "1", "--sleep", "0.3")
    job.runner_pid_dir.mkdir(parents=True)
    hold = job.runner_pid_dir / f"{SECOND}{HOLD_SUFFIX}"
    hold.touch()

    runner = job.start()
    try:
        deadline = time.monotonic() + 60
        while job.runs(SECOND) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2)  # ten restart delays: it would have come back by now
        assert job.runs(SECOND) == 1, "a held pod was restarted"
        hold.unlink()
        out, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()

    assert runner.returncode == 0, out
    assert f"{SECOND} stays pending while {hold} exists (no node for it)" in out
    assert f"{SECOND}: {hold} is gone, the pod can start" in out
    assert out.index("is gone") < out.index(f"{SECOND} run 2 started")
    assert job.runs(SECOND) == 2 and job.runs(FIRST) == 1
