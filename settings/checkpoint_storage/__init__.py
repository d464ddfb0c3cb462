"""Where a stack keeps its runs, on the stack's side: one module per kind of checkpoint storage
(`checkpoints.storage`), behind one interface, and every other module asks the stack's storage
instead of testing which one it is.

A storage answers everything the stack, the render, the local run and `make checkpoint` need of
it: which `checkpoints.*` keys are its own (another storage's key is refused by name), the rules
its keys and the stack follow, the run's root (the pods' `CHECKPOINT_DIR`, the trainer's
`--checkpoint-dir`), whether the pods mount it (its volume and mount path) or reach it over the
network (the client's plain environment, the credentials its Secret holds), whether the stack
creates a claim for it and keeps it on destroy, how `make checkpoint` reads it (a reader pod that
mounts it, or its root straight from this machine) and how `make local` places it on this
machine. The built-in ones are `claim.py` (a PersistentVolumeClaim) and `s3.py` (a bucket of an
S3-compatible store); a new one is one module implementing `CheckpointStorage` and one
`register_storage` call (tests/settings/checkpoint_storage/test_registry.py adds a throwaway
one in a temporary module and renders a stack with it).

The trainer's side has a seam of its own (trainer/storage/: the reads and writes of a run); the
run's root, `root(...)`, is what joins the two.

Layer: above the setting values, below the settings, which validate through it; the settings'
types are annotations here only, so nothing imports back up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from settings.stack import CheckpointSettings, StackSettings


class CheckpointStorage(ABC):
    """One kind of checkpoint storage, as the stack's side sees it. Stateless: every answer is
    a function of the settings it is given."""

    # `checkpoints.storage`'s value that chooses it.
    name: ClassVar[str]
    # The `checkpoints.*` keys (camelCase, as written) it reads: one written for another storage
    # would be silently ignored, so it is refused.
    keys: ClassVar[tuple[str, ...]]
    # Of its keys, the secrets (shown as REDACTED in any error).
    secret_keys: ClassVar[tuple[str, ...]] = ()
    # Where a run is, in a sentence's words ("on the claim", "in the bucket").
    where: ClassVar[str]
    # What an error says about a key of another storage: why it does not apply here.
    without_keys_of_others: ClassVar[str]

    def check(self, checkpoints: CheckpointSettings, given: Mapping[str, Any]) -> None:
        """The rules of its own keys beyond each key's type (a required key, keys that go
        together), as `refusal`s; `given` is what the stack wrote (never a default)."""
        return None

    def check_stack(self, settings: StackSettings) -> None:
        """Its rules across the stack's other settings, as `refusal`s."""
        return None

    @abstractmethod
    def root(self, checkpoints: CheckpointSettings) -> str:
        """Where the stack's runs live, each in `<root>/<job.name>`: a path the pods mount, or a
        URL the trainer's storage opens (trainer/storage/)."""

    def mount_path(self, checkpoints: CheckpointSettings) -> str | None:
        """Where the pods mount it; None: they reach it over the network (no volume), and
        `make checkpoint` and `make local` use its root as it is."""
        return None

    def volume_source(self, settings: StackSettings, *, read_only: bool = False) -> dict[str, Any]:
        """The pods' volume of a mounted storage, without its name (`persistentVolumeClaim`,
        ...); `read_only` for `make checkpoint`'s reader pod."""
        raise NotImplementedError(f"checkpoints.storage {self.name} is not mounted")

    def claim(self, settings: StackSettings) -> str | None:
        """The PersistentVolumeClaim the pods mount, created or not by the stack; None: none."""
        return None

    def claim_spec(self, settings: StackSettings) -> dict[str, Any] | None:
        """The spec of the claim the stack creates and owns; None: it creates none."""
        return None

    def retains_claim(self, checkpoints: CheckpointSettings) -> bool:
        """`pulumi destroy` leaves the claim the stack created, and its data, in the cluster."""
        return False

    def co_locates_pods(self, checkpoints: CheckpointSettings) -> bool:
        """The job's pods must share one node to mount it (a ReadWriteOnce claim)."""
        return False

    def client_environment(self, checkpoints: CheckpointSettings) -> dict[str, str]:
        """The pods' plain environment for reaching it (a tool reading it from this machine sets
        the same where its own environment does not)."""
        return {}

    def credentials(self, checkpoints: CheckpointSettings) -> dict[str, Any]:
        """What its Secret holds, by the environment variable the pods read it as (the values as
        the settings hold them: secret Outputs, or REDACTED offline); empty: no Secret."""
        return {}

    def at_root(self, checkpoints: CheckpointSettings, url: str) -> CheckpointSettings | None:
        """`make local --checkpoint-root URL`: these settings with the run kept at `url`, if
        `url` is one of its roots; None if not (raises ValueError naming the part of a root of
        its that breaks a rule)."""
        return None

    def on_this_machine(
        self, checkpoints: CheckpointSettings, environ: Mapping[str, str]
    ) -> CheckpointSettings:
        """The settings a run on this machine uses: a networked storage reached as this
        environment says (an endpoint the pods reach by a name this machine does not resolve)."""
        return checkpoints

    def machine_credentials(
        self, checkpoints: CheckpointSettings, environ: Mapping[str, str]
    ) -> dict[str, str]:
        """The credentials a container of a local run gets from this environment, when the stack
        names none (a process inherits them; a container has only what it is given)."""
        return {}


_EXTRA: dict[str, CheckpointStorage] = {}


def _registry() -> dict[str, CheckpointStorage]:
    # The built-in modules are imported here, when first asked, since each imports this
    # interface (a module-level import would be a circle).
    from settings.checkpoint_storage import claim, s3

    return {storage.name: storage for storage in (claim.STORAGE, s3.STORAGE, *_EXTRA.values())}


def register_storage(storage: CheckpointStorage) -> None:
    """Make `storage` a value of `checkpoints.storage` (a module of another package, a test's)."""
    if storage.name in _registry():
        raise ValueError(f"checkpoints.storage {storage.name!r} is registered already")
    _EXTRA[storage.name] = storage


def unregister_storage(name: str) -> None:
    _EXTRA.pop(name, None)


def storage_names() -> list[str]:
    """The values `checkpoints.storage` accepts, the default first."""
    return list(_registry())


def storage_named(name: str) -> CheckpointStorage:
    """The storage `checkpoints.storage: name` chooses (KeyError: none is registered so)."""
    return _registry()[name]


def owners_of(key: str) -> list[CheckpointStorage]:
    """The storages that read `checkpoints.<key>` (none: `storage`, which every one reads)."""
    return [storage for storage in _registry().values() if key in storage.keys]


def secret_checkpoint_keys() -> tuple[str, ...]:
    """Every storage's secret `checkpoints.*` keys (the program reads them as secret Outputs)."""
    return tuple(key for storage in _registry().values() for key in storage.secret_keys)


def kept_at(checkpoints: CheckpointSettings, url: str) -> CheckpointSettings | None:
    """`checkpoints` with the run kept at `url` by the storage whose root it is (`make local
    --checkpoint-root s3://...`); None if no storage has such roots. ValueError: `url` is one
    storage's, but breaks one of its rules."""
    for storage in _registry().values():
        if (moved := storage.at_root(checkpoints, url)) is not None:
            return moved
    return None
