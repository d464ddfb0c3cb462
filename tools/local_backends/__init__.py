"""The local run's backends: where each pod of the job runs on this machine.

`tools/run_local.py` (the command line) builds the job with the same builders as the Pulumi
program, then hands it to one backend: `process` (tools/local_backends/process.py: each pod a
process tree of this checkout) or `container` (tools/local_backends/container.py: each pod a
container of the training image). Both read the pod the same way (tools/local_backends/pods.py)
and are run by the same supervisor (tools/supervisor.py). A new backend implements
`LocalBackend`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from settings.stack import StackSettings
    from tools.supervisor import ReplicaCommand


@dataclass(frozen=True)
class ReplicaPlan:
    """Where the pods of one local run meet and keep their data, whichever backend runs them:
    the namespace their environment names, the checkpoint claim's local directory, the
    rendezvous port on this machine, the TrainingRuntime a TrainJob runs on (where the stack
    declares it), and the local directory of each `job.volumes` claim (claim -> directory)."""

    namespace: str
    checkpoint_root: Path
    master_port: int
    runtime: Mapping[str, Any] | None = None
    data_dirs: Mapping[str, Path] = field(default_factory=dict)


class LocalBackend(Protocol):
    """What the command line asks of a backend, in the order it asks."""

    runs_as: str
    """how the start line names the replicas ("local processes", "containers")"""
    image: str
    """the image the job's manifest names"""

    def fit_to_machine(self, settings: StackSettings) -> tuple[StackSettings, str | None]:
        """The settings this machine can run (GPUs or the CPU), and a notice when they differ."""
        ...

    def check_job(self, job: Mapping[str, Any]) -> None:
        """Refuse a job this backend cannot run, with a one-line error naming the setting."""
        ...

    def replica_commands(
        self, job: Mapping[str, Any], plan: ReplicaPlan
    ) -> tuple[list[ReplicaCommand], list[str]]:
        """One command per pod, for the supervisor, and notices of what has no local meaning."""
        ...

    def rendezvous(self, job: Mapping[str, Any], master_port: int) -> str:
        """Where the replicas meet, for the start line."""
        ...

    def prepare(
        self, job: Mapping[str, Any], checkpoint_root: Path, runtime: Mapping[str, Any] | None
    ) -> None:
        """Make the existing checkpoint root usable by the replicas, as the kubelet makes a claim
        usable by the pods; a one-line error (the backend's) when it cannot."""
        ...

    def record(self, commands: Sequence[ReplicaCommand], pid_dir: Path) -> None:
        """Leave what a test or a user needs to reach a replica in `pid_dir`."""
        ...
