"""components/build_leftovers.py: which containers and images a build left, and only those.

The engine here is an in-memory store with the calls Leftovers makes, so each rule can be set up
exactly; the real-engine suite runs the hooks against podman's Docker API during `pulumi up`
(tests/e2e/test_image_build.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from components.build_leftovers import Container, Leftovers, StoreContents


@dataclass
class Store:
    """Images (id -> parent id and tags) and containers, as an engine reports them."""

    images: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    containers: dict[str, Container] = field(default_factory=dict)

    def add_image(self, image_id: str, parent: str = "", tags: list[str] | None = None) -> None:
        self.images[image_id] = (parent, tags or [])

    def add_container(self, container_id: str, image_id: str, *, running: bool = False) -> None:
        self.containers[container_id] = Container(
            container_id, f"sha256:{image_id}", running, external=True
        )

    def contents(self) -> StoreContents:
        return StoreContents(frozenset(self.containers), frozenset(self.images))

    # -- what Leftovers asks of an Engine ------------------------------------------------------

    def image(self, reference: str) -> dict[str, Any] | None:
        key = reference.removeprefix("sha256:")
        for image_id, (parent, tags) in self.images.items():
            if key == image_id or key in tags:
                return {"Id": f"sha256:{image_id}", "Parent": parent and f"sha256:{parent}",
                        "RepoTags": tags}  # fmt: skip
        return None

    def list_containers(self) -> list[Container]:
        return list(self.containers.values())

    def remove_container(self, container: Container) -> None:
        del self.containers[container.id]

    def remove_image(self, reference: str) -> None:
        del self.images[reference.removeprefix("sha256:")]


class Engine:
    """The Engine interface over a Store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.image = store.image
        self.containers = store.list_containers
        self.remove_container = store.remove_container
        self.remove_image = store.remove_image


TAG = "registry.example.com/trainer:ctx-1"


def classic_build(store: Store, base: str, steps: list[str]) -> None:
    """What a classic build leaves: each step's image on the previous one, a working container on
    the base and on each intermediate image, the last step tagged."""
    parent = base
    for step in steps:
        store.add_container(f"ctr-on-{parent}", parent)
        store.add_image(step, parent, [TAG] if step == steps[-1] else [])
        parent = step


def test_a_classic_build_leaves_its_working_containers_and_intermediate_images() -> None:
    store = Store()
    store.add_image("base", tags=["localhost/base:1"])
    store.add_container("users-own", "base")
    before = store.contents()
    classic_build(store, "base", ["env", "copy", "run", "final"])

    found = Leftovers.of_build(Engine(store), TAG, before)

    assert sorted(c.id for c in found.containers) == [
        "ctr-on-base",
        "ctr-on-copy",
        "ctr-on-env",
        "ctr-on-run",
    ]
    assert found.images == ["run", "copy", "env"]  # child first
    found.remove(Engine(store))
    assert set(store.images) == {"base", "final"}
    assert set(store.containers) == {"users-own"}


def test_cached_steps_and_tagged_ancestors_stay_but_new_containers_on_them_go() -> None:
    store = Store()
    store.add_image("base", tags=["localhost/base:1"])
    store.add_image("cached-env", "base")  # a step an earlier build left
    store.add_image("kept", "cached-env", ["localhost/someone-tagged-this:1"])
    before = store.contents()
    store.add_container("ctr-on-cached-env", "cached-env")
    store.add_container("ctr-on-kept", "kept")
    store.add_image("copy", "kept")
    store.add_container("ctr-on-copy", "copy")
    store.add_image("final", "copy", [TAG])

    found = Leftovers.of_build(Engine(store), TAG, before)

    assert sorted(c.id for c in found.containers) == [
        "ctr-on-cached-env",
        "ctr-on-copy",
        "ctr-on-kept",
    ]
    assert found.images == ["copy"]


def test_running_containers_and_containers_of_other_images_are_left() -> None:
    store = Store()
    store.add_image("base")
    store.add_image("other")
    before = store.contents()
    classic_build(store, "base", ["copy", "final"])
    store.add_container("running-on-copy", "copy", running=True)
    store.add_container("on-another-image", "other")

    found = Leftovers.of_build(Engine(store), TAG, before)

    assert sorted(c.id for c in found.containers) == ["ctr-on-base", "ctr-on-copy"]


def test_a_buildkit_build_or_a_missing_image_leaves_nothing_to_remove() -> None:
    store = Store()
    before = store.contents()
    store.add_image("final", tags=[TAG])  # BuildKit records no parent and no containers
    assert Leftovers.of_build(Engine(store), TAG, before) == Leftovers()
    assert Leftovers.of_build(Engine(store), "registry.example.com/trainer:gone", before) == (
        Leftovers()
    )
