"""job-active-deadline / job-ttl-after-finished: advisory bounds on GPU time and leftovers."""

from __future__ import annotations

from policy.rules.lifecycle import job_active_deadline, job_ttl_after_finished
from policy.rules.model import PVC_TYPE, PYTORCHJOB_TYPE
from tests.policy import samples


def test_bounded_job_gets_no_warning() -> None:
    job = samples.pytorchjob()
    assert job_active_deadline(PYTORCHJOB_TYPE, job) == []
    assert job_ttl_after_finished(PYTORCHJOB_TYPE, job) == []


def test_open_ended_job_gets_both_warnings() -> None:
    job = samples.pytorchjob()
    job["spec"]["runPolicy"] = {"backoffLimit": 3}
    [deadline] = job_active_deadline(PYTORCHJOB_TYPE, job)
    [ttl] = job_ttl_after_finished(PYTORCHJOB_TYPE, job)
    assert deadline.startswith("spec.runPolicy.activeDeadlineSeconds is not set")
    assert ttl.startswith("spec.runPolicy.ttlSecondsAfterFinished is not set")


def test_other_resource_types_are_ignored() -> None:
    assert job_active_deadline(PVC_TYPE, {}) == []
    assert job_ttl_after_finished(PVC_TYPE, {}) == []
