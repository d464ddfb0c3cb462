"""Where a queued job stands in Kueue, in words a person can act on.

Pure functions over the API server's JSON, as readers/job_state.py is for the job itself.
Kueue admits a job that names a LocalQueue (`job.queue`, builders/manifests.py's
`KUEUE_QUEUE_LABEL`) through a Workload it creates for it (labelled with the job's UID): the
Workload's conditions say whether the job holds quota (QuotaReserved; while it does not, its
reason and message say why: Pending with the quota it lacks, Inadmissible when its LocalQueue or
ClusterQueue is missing or stopped), whether it is admitted (Admitted), and whether it was evicted
or preempted since (Evicted, Preempted, Requeued). The job stays suspended until it is admitted,
and is suspended again when evicted.

Two of Kueue's reasons never clear by waiting: a LocalQueue or ClusterQueue that does not exist,
and a job that asks for more than the ClusterQueue's whole quota ("... > maximum capacity", or a
resource it has no quota of at all). The watch fails on those at once (`hopeless`); every other
reason is a wait.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from builders.manifests import KUEUE_QUEUE_LABEL
from readers.conditions import Condition, conditions_by_type

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
WORKLOAD_PLURAL = "workloads"
LOCAL_QUEUE_PLURAL = "localqueues"
# Kueue labels each Workload with the UID of the job it admits.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# How often a wait repeats that the job is still queued, and why.
QUEUED_REMINDER_SECONDS = 30
# Kueue's messages for what waiting does not fix: its workload controller's for a missing queue,
# its flavor assigner's for a request over the ClusterQueue's whole quota.
_MISSING_QUEUE = re.compile(r"\b(LocalQueue|ClusterQueue) (\S+) doesn't exist")
_NEVER_FITS = ("> maximum capacity", "unavailable in ClusterQueue")


@dataclass(frozen=True)
class QueueState:
    """A job's place in Kueue: its LocalQueue, and its Workload's state (none yet: Kueue has
    not picked the job up)."""

    local_queue: str
    cluster_queue: str = ""  # the LocalQueue's ClusterQueue, once known
    workload: str = ""  # the Workload's name; empty while there is none
    quota_reserved: bool = False
    admitted: bool = False
    finished: bool = False
    reason: str = ""  # QuotaReserved's reason while the job waits (Pending, Inadmissible)
    message: str = ""
    evicted: str = ""  # "<reason>: <message>" of a true Evicted condition
    preempted: str = ""  # the same for Preempted
    local_queue_exists: bool | None = None  # None: not known (not allowed to read it)
    # False on a cluster without Kueue's API: nothing queues the job, it runs as if unlabelled.
    kueue_installed: bool = True

    @property
    def waiting(self) -> bool:
        """The job waits for Kueue: not admitted, and not finished."""
        return self.kueue_installed and not self.admitted and not self.finished

    @property
    def hopeless(self) -> str | None:
        """Why the job can never be admitted as things stand, in one line; None while waiting
        may still admit it."""
        if not self.waiting:
            return None
        if self.local_queue_exists is False:
            return (
                f"the LocalQueue {self.local_queue} does not exist in the job's namespace "
                "(job.queue names it; a cluster administrator creates it)"
            )
        missing = _MISSING_QUEUE.search(self.message)
        if missing and missing.group(1) == "ClusterQueue":
            return (
                f"the LocalQueue {self.local_queue} sends jobs to the ClusterQueue "
                f"{missing.group(2)}, which does not exist"
            )
        if missing and self.local_queue_exists is None:
            return f"Kueue says: {self.message}"
        if any(words in self.message for words in _NEVER_FITS):
            queue = self.cluster_queue or "its ClusterQueue"
            return (
                f"the job asks for more than the whole quota of {queue} and can never be "
                f"admitted there (Kueue: {self.message}); ask for less (job.cpu, job.memory, "
                "job.gpus, the replica counts) or queue it elsewhere (job.queue)"
            )
        return None


def _true(conditions: Mapping[str, Condition], kind: str) -> bool:
    condition = conditions.get(kind)
    return condition is not None and condition.true


def _said(condition: Condition | None) -> str:
    """A true condition's "<reason>: <message>"; empty when it is not true."""
    if condition is None or not condition.true:
        return ""
    return f"{condition.reason}: {condition.message}".strip(": ")


def queue_name(job: Mapping[str, Any]) -> str | None:
    """The LocalQueue the job names, if it names one."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    value = labels.get(KUEUE_QUEUE_LABEL)
    return str(value) if value else None


def newest_workload(workloads: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The job's current Workload among those labelled with its UID (Kueue replaces one whose
    job's pod sets changed)."""
    live = [w for w in workloads if not (w.get("metadata") or {}).get("deletionTimestamp")]

    def created(workload: Mapping[str, Any]) -> str:
        return str((workload.get("metadata") or {}).get("creationTimestamp") or "")

    return max(live, key=created, default=None)


def queue_state(
    local_queue: str,
    workload: Mapping[str, Any] | None,
    local_queue_object: Mapping[str, Any] | None = None,
    *,
    local_queue_exists: bool | None = None,
) -> QueueState:
    """A job's QueueState from its Workload (None: not created yet) and its LocalQueue (None:
    unknown, or missing when `local_queue_exists` is False)."""
    cluster = str(((local_queue_object or {}).get("spec") or {}).get("clusterQueue") or "")
    if local_queue_object is not None:
        local_queue_exists = True
    if workload is None:
        return QueueState(
            local_queue=local_queue,
            cluster_queue=cluster,
            local_queue_exists=local_queue_exists,
        )
    conditions = conditions_by_type(workload)
    admission = (workload.get("status") or {}).get("admission") or {}
    cluster = str(admission.get("clusterQueue") or cluster)
    reserved = conditions.get("QuotaReserved")
    # While the quota is not reserved, its condition's reason and message say why.
    waiting = reserved if reserved is not None and not reserved.true else None
    return QueueState(
        local_queue=local_queue,
        cluster_queue=cluster,
        workload=str((workload.get("metadata") or {}).get("name") or ""),
        quota_reserved=_true(conditions, "QuotaReserved"),
        admitted=_true(conditions, "Admitted"),
        finished=_true(conditions, "Finished"),
        reason=waiting.reason if waiting else "",
        message=waiting.message if waiting else "",
        evicted=_said(conditions.get("Evicted")),
        preempted=_said(conditions.get("Preempted")),
        local_queue_exists=local_queue_exists,
    )


def queue_line(state: QueueState) -> str:
    """One line: where the job is queued and why it waits, or who admitted it."""
    if not state.kueue_installed:
        return (
            f"names LocalQueue {state.local_queue} (job.queue), but the cluster has no Kueue "
            "(no Workload API): nothing queues it"
        )
    where = f"LocalQueue {state.local_queue}"
    if state.cluster_queue:
        where += f" (ClusterQueue {state.cluster_queue})"
    if state.finished:
        return f"finished in {where}"
    if state.admitted:
        line = f"admitted by {where}"
        return line + (f"; evicted before: {state.evicted}" if state.evicted else "")
    if not state.workload:
        return (
            f"queued in {where}: waiting for Kueue to take it in (no Workload yet; is Kueue "
            "running, with this job's integration on?)"
        )
    line = f"queued in {where}: pending"
    if state.reason or state.message:
        line += f", reason {state.reason or 'unknown'}"
        line += f": {state.message}" if state.message else ""
    if state.preempted:
        line += f"; preempted ({state.preempted})"
    elif state.evicted:
        line += f"; evicted ({state.evicted})"
    return line
