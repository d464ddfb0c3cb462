"""The seam between the control plane and a component it runs: Kubeflow Trainer with JobSet
(cluster/trainer_plane.py), Kueue (cluster/kueue_plane.py) and the real node
(cluster/real_node.py) each implement `PlaneComponent`, and see the plane only as `Plane`: its
public facts (tool set, directory, kubeconfig, API server) and the services it offers (start a
process that stops with the plane, wait until it is ready, poll the API).

`ControlPlane` (cluster/control_plane.py) satisfies `Plane` and starts every component with
`ControlPlane.add`; it stops them, newest first, before its own processes. So a component never
imports the control plane, and the control plane imports each component: no circle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from cluster.processes import STARTUP_TIMEOUT, PlaneProcess


class Plane(Protocol):
    """What a component may use of the control plane it runs on."""

    @property
    def bin_dir(self) -> Path:
        """The tool set's bin directory (scripts/e2e-tools.sh); its manifests lie beside it."""
        ...

    @property
    def workdir(self) -> Path:
        """The plane's directory: a component keeps its configuration, certificates and logs
        there."""
        ...

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig of the plane's API server."""
        ...

    @property
    def server(self) -> str:
        """The API server's URL (https://127.0.0.1:PORT)."""
        ...

    @property
    def private_mounts(self) -> bool:
        """Whether components can get mount namespaces of their own (root, util-linux's
        unshare)."""
        ...

    def api(self) -> Any:
        """A kubernetes.client.ApiClient for the plane."""
        ...

    def start_process(
        self,
        name: str,
        args: list[str],
        env: dict[str, str] | None = None,
        wrapper: list[str] | None = None,
        command: list[str] | None = None,
    ) -> PlaneProcess:
        """Start NAME from the bin directory (or `command`) with `args`, its log in the plane's
        directory; the plane stops it with itself."""
        ...

    def wait_ready(self, process: PlaneProcess, what: str, ready: Callable[[], bool]) -> None:
        """Return once `ready()`; fail naming `process` if it exits first or never gets there."""
        ...

    def poll(self, what: str, ready: Callable[[], bool], timeout: float = STARTUP_TIMEOUT) -> None:
        """Return once `ready()` (its exceptions count as not yet); fail after `timeout`."""
        ...

    def private_dir_wrapper(self, fixed: Path, own: Path) -> list[str]:
        """The command prefix that runs a process with `own` bound at the `fixed` path it
        insists on, in a mount namespace of its own; needs private_mounts."""
        ...

    def component_args(self) -> list[str]:
        """What a Kubernetes component (kube-controller-manager, kube-scheduler) needs to run
        against the plane: the admin kubeconfig, one instance, its own HTTPS port on loopback."""
        ...


class PlaneComponent(ABC):
    """A component the control plane runs, started with `ControlPlane.add(component)`."""

    #: Its name in the plane's errors and logs.
    name: str

    @abstractmethod
    def start(self, plane: Plane) -> None:
        """Start on `plane` and return once ready. Processes started with
        `plane.start_process` are the plane's: it stops them with itself."""

    def stop(self) -> None:  # noqa: B027 (a default, not an abstract step)
        """Stop, and remove what `start` made that the plane does not stop itself; safe to call
        twice, and after a start that failed. By default there is nothing more."""
