"""A Kubernetes object's status condition, read once: the job's (components/job_state.py) and
its Kueue Workload's (components/queue_state.py) are the same shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str  # on one line: the API server keeps a controller's line breaks
    since: str  # lastTransitionTime, as the API server writes it (UTC)

    @property
    def true(self) -> bool:
        return self.status == "True"


def condition_of(raw: Mapping[str, Any]) -> Condition:
    return Condition(
        type=str(raw.get("type", "")),
        status=str(raw.get("status", "")),
        reason=str(raw.get("reason") or ""),
        message=" ".join(str(raw.get("message") or "").split()),
        since=str(raw.get("lastTransitionTime") or raw.get("lastUpdateTime") or ""),
    )
