"""Advisory: bounds on how long a job may hold GPUs and how long its pods linger afterwards.

Warnings rather than errors because a long, open-ended run can be exactly what a team wants; the
reviewer should see that it is open-ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .jobs import job_view
from .model import PYTORCHJOB_TYPE, dig


def job_active_deadline(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    view = job_view(resource_type)
    if view is None or dig(props, *view.active_deadline_path):
        return []
    return [
        f"{'.'.join(view.active_deadline_path)} is not set: a hung job keeps its GPUs until "
        "someone deletes it (stack setting job.activeDeadlineSeconds)"
    ]


def job_ttl_after_finished(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    # A TrainJob's TTL is its runtime's (the JobSet template's ttlSecondsAfterFinished).
    if resource_type != PYTORCHJOB_TYPE:
        return []
    if dig(props, "spec", "runPolicy", "ttlSecondsAfterFinished") is not None:
        return []
    return [
        "spec.runPolicy.ttlSecondsAfterFinished is not set: the finished job and its pods stay "
        "until deleted (stack setting job.ttlSecondsAfterFinished)"
    ]
