"""A Kubernetes object's status condition, read once: the job's (readers/job_state.py), its
Kueue Workload's (readers/queue_state.py) and a LocalQueue's are the same shape."""

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


def conditions_by_type(obj: Mapping[str, Any] | None) -> dict[str, Condition]:
    """An object's conditions (`status.conditions`), by type; none for no object yet."""
    items = ((obj or {}).get("status") or {}).get("conditions") or []
    return {condition.type: condition for condition in map(condition_of, items)}


def is_true(obj: Mapping[str, Any] | None, condition_type: str) -> bool:
    """Whether the object has the condition, true."""
    condition = conditions_by_type(obj).get(condition_type)
    return condition is not None and condition.true
