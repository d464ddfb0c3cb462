"""What an image build leaves in the engine's store besides the image, removed after the build.

Why: pulumi-docker 4.x builds without asking the engine to remove the builder's intermediate
containers (the Docker API's `rm`, which `docker build` sets by default), so with the classic
builder every build leaves one working container per Dockerfile step and the intermediate image
each step committed: on podman's Docker-compatible API, 5 containers and 4 images per build of
trainer/Dockerfile, and 10 and 8 after two. Repeated `pulumi up`s in CI and on laptops would fill
the disk. BuildKit (Docker Engine's default builder) leaves neither, and then nothing is removed.

How: resource hooks on the stack's `docker.Image` list the engine's containers and images before
the build and, after it, remove what the build added besides the image it tagged: the containers
it created on the base image or on its intermediate images, then those intermediate images (the
image's untagged ancestors). Anything that existed before the build is left alone, and so is
anything the build did not descend from. An update also drops the local tag of the image it
replaces (the registry keeps it). The engine is the one the Docker provider builds with:
DOCKER_HOST (with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH), else the default socket. Hooks run on
`pulumi up` only, never on a preview.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import pulumi

# Podman keeps the builder's (buildah's) working containers outside its own container list: its
# libpod API lists them with `external=true` and removes them with `force=true`.
_PODMAN = "Podman Engine"


@dataclass(frozen=True)
class StoreContents:
    """The ids of every container (the builder's working containers too) and image."""

    containers: frozenset[str]
    images: frozenset[str]


@dataclass(frozen=True)
class Container:
    id: str
    image_id: str
    running: bool
    external: bool


class Engine:
    """The Docker Engine API the Docker provider builds through (Docker Engine or podman)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        components = client.version().get("Components") or []
        podman = [c.get("Version") for c in components if c.get("Name") == _PODMAN]
        self.podman = bool(podman)
        # The libpod API is versioned by podman's own version, not the Docker API's.
        self._libpod = f"{client.api.base_url}/v{podman[0] if podman else ''}/libpod"

    @classmethod
    def from_env(cls) -> Engine:
        import docker

        return cls(docker.from_env())

    def containers(self) -> list[Container]:
        api = self._client.api
        found = [
            Container(entry["Id"], entry["ImageID"], entry["State"] == "running", external=False)
            for entry in api.containers(all=True)
        ]
        if self.podman:
            known = {container.id for container in found}
            listed = api.get(
                f"{self._libpod}/containers/json", params={"all": "true", "external": "true"}
            )
            listed.raise_for_status()
            found += [
                Container(entry["Id"], entry["ImageID"], running=False, external=True)
                for entry in listed.json()
                if entry["Id"] not in known
            ]
        return found

    def contents(self) -> StoreContents:
        images = {entry["Id"] for entry in self._client.api.images(all=True)}
        return StoreContents(
            frozenset(container.id for container in self.containers()),
            frozenset(_bare_id(image) for image in images),
        )

    def image(self, reference: str) -> dict[str, Any] | None:
        import docker

        try:
            return self._client.api.inspect_image(reference)
        except docker.errors.NotFound:
            return None

    def remove_container(self, container: Container) -> None:
        api = self._client.api
        if container.external:
            removed = api.delete(
                f"{self._libpod}/containers/{container.id}", params={"force": "true"}
            )
            if removed.status_code != 404:  # 404: gone already
                removed.raise_for_status()
        else:
            import docker

            with contextlib.suppress(docker.errors.NotFound):  # gone already
                api.remove_container(container.id, force=True)

    def remove_image(self, reference: str) -> None:
        """Remove an image; untagged parents no other image needs go with it (both engines)."""
        import docker

        # NotFound: gone already, with a child removed before it.
        with contextlib.suppress(docker.errors.NotFound):
            self._client.api.remove_image(reference)


def _bare_id(image_id: str) -> str:
    return image_id.removeprefix("sha256:")


@dataclass
class Leftovers:
    """What one build left besides its image, found by comparing the store with `before`."""

    containers: list[Container] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # the built image's ancestors, child first

    @classmethod
    def of_build(cls, engine: Engine, image: str, before: StoreContents) -> Leftovers:
        built = engine.image(image)
        if built is None:
            return cls()
        # Every ancestor: the builder starts a working container on each step's image, also on
        # the base image and on steps it found cached.
        ancestors: set[str] = set()
        intermediates: list[str] = []
        parent = _bare_id(built.get("Parent") or "")
        while parent and (found := engine.image(f"sha256:{parent}")) is not None:
            ancestors.add(parent)
            if parent not in before.images and not found.get("RepoTags"):
                intermediates.append(parent)
            parent = _bare_id(found.get("Parent") or "")
        containers = [
            container
            for container in engine.containers()
            if container.id not in before.containers
            and not container.running
            and _bare_id(container.image_id) in ancestors
        ]
        return cls(containers, intermediates)

    def remove(self, engine: Engine) -> None:
        for container in self.containers:
            engine.remove_container(container)
        for image in self.images:
            engine.remove_image(f"sha256:{image}")


class BuildLeftovers:
    """Resource hooks for one `docker.Image`: `binding()` goes into its ResourceOptions."""

    def __init__(self, name: str) -> None:
        self._before: StoreContents | None = None
        # A failed cleanup is a warning: the image is built and pushed, the stack is right.
        options = pulumi.ResourceHookOptions(ignore_errors=True)
        self._snapshot = pulumi.ResourceHook(f"{name}-store-before", self._record, options)
        self._cleanup = pulumi.ResourceHook(f"{name}-leftovers", self._remove, options)
        # A build whose push then failed (the registry unreachable) left the same: the next
        # `pulumi up` builds again, so without this every failed push would add its set.
        self._after_failure = pulumi.ErrorHook(f"{name}-leftovers-on-error", self._failed)

    def binding(self) -> pulumi.ResourceHookBinding:
        return pulumi.ResourceHookBinding(
            before_create=[self._snapshot],
            before_update=[self._snapshot],
            after_create=[self._cleanup],
            after_update=[self._cleanup],
            on_error=[self._after_failure],
        )

    def _record(self, args: pulumi.ResourceHookArgs) -> None:
        self._before = Engine.from_env().contents()

    def _failed(self, args: pulumi.ErrorHookArgs) -> bool:
        """Remove what the failed build left; never retry (the next `pulumi up` builds again)."""
        if self._before is None or args.failed_operation not in ("create", "update"):
            return False
        image = str((args.new_inputs or {}).get("imageName") or "")
        try:
            engine = Engine.from_env()
            Leftovers.of_build(engine, image, self._before).remove(engine)
        except Exception as error:  # a failed cleanup must not hide the build's own error
            pulumi.log.warn(f"could not remove what the failed build of {image} left: {error}")
        self._before = None
        return False

    def _remove(self, args: pulumi.ResourceHookArgs) -> None:
        if self._before is None:
            return
        engine = Engine.from_env()
        image = str((args.new_inputs or {})["imageName"])
        Leftovers.of_build(engine, image, self._before).remove(engine)
        self._before = None
        replaced = (args.old_inputs or {}).get("imageName")
        if replaced and replaced != image and engine.image(str(replaced)) is not None:
            engine.remove_image(str(replaced))
