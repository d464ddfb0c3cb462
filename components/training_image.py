"""TrainingImage: the job's image, built and pushed with pulumi-docker, referenced by digest.

What is built: `image.context` (the project's `trainer/` by default, or a directory of your own
code) with `image.dockerfile` and `image.buildArgs` plus `BASE_IMAGE`. Whatever the context, the
digest pin, the push and the removal of the build's leftovers (components/build_leftovers.py)
are the same.

Why a digest: the PyTorchJob must run exactly the bytes this stack built. A tag can be moved by
the next push; `repo@sha256:...` cannot, and a new digest is what makes the job's spec change (and
so replaces the job) after the trainer code changes.

Why the digest is looked up in the registry rather than taken from `docker.Image.repo_digest`:
pulumi-docker 4.x reports the engine's `RepoDigests` when the push stream carries no digest of its
own (pulumi/pulumi-docker#846), and podman's Docker-compatible API keeps the local manifest's
digest there after a push that compressed the layers (containers/podman#14779): a job pinned to
it would reference a manifest the registry never received. The registry's answer for the pushed
tag is the one digest a node can pull, whatever the engine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import pulumi
import pulumi_docker as docker

from components.build_leftovers import BuildLeftovers
from settings.stack import REPO_ROOT, TRAINER_CONTEXT, ImageSettings, RegistrySettings
from settings.values import registry_host

TRAINER_DIR = REPO_ROOT / TRAINER_CONTEXT
_SKIPPED_PARTS = {"__pycache__", ".pytest_cache", ".git"}
BUILDER_VERSIONS = {"buildkit": "BuilderBuildKit", "classic": "BuilderV1"}


def context_tag(
    context: Path = TRAINER_DIR,
    dockerfile: Path | None = None,
    build_args: Mapping[str, str] | None = None,
) -> str:
    """A tag derived from what the build reads: the context's files, the Dockerfile when it
    lies outside the context, and the build arguments besides BASE_IMAGE; so each distinct
    image gets its own tag (the trainer's context alone, for the project's image)."""
    digest = hashlib.sha256()
    if context.is_dir():
        for path in sorted(context.rglob("*")):
            if path.is_file() and not _SKIPPED_PARTS & set(path.parts) and path.suffix != ".pyc":
                digest.update(path.relative_to(context).as_posix().encode())
                digest.update(b"\0")
                digest.update(path.read_bytes())
                digest.update(b"\0")
    if dockerfile is not None and dockerfile.is_file() and not dockerfile.is_relative_to(context):
        digest.update(b"dockerfile\0" + dockerfile.read_bytes() + b"\0")
    for name, value in sorted((build_args or {}).items()):
        digest.update(f"arg\0{name}\0{value}\0".encode())
    return "ctx-" + digest.hexdigest()[:12]


def registry_auth(
    image: ImageSettings, registry: RegistrySettings | None
) -> list[docker.ProviderRegistryAuthArgs]:
    """The Docker provider's credentials for the registry the image is pushed to, which its
    registry lookup uses: the stack's `registry` when set, anonymous otherwise. An `http://`
    address is what makes the lookup speak plain HTTP (`image.insecureRegistry`)."""
    if not image.build or image.repository is None:
        return []
    host = registry_host(image.repository)
    if host is None:  # Docker Hub's short names: the lookup's own default, anonymous HTTPS
        return []
    address = f"http://{host}" if image.insecure_registry else host
    if registry is None:
        if not image.insecure_registry:
            return []
        # The provider sends placeholder credentials to a registry without auth.
        return [docker.ProviderRegistryAuthArgs(address=address, auth_disabled=True)]
    return [
        docker.ProviderRegistryAuthArgs(
            address=address,
            username=registry.username,
            password=pulumi.Output.secret(registry.password),
        )
    ]


class TrainingImage(pulumi.ComponentResource):
    """Builds `image.context` (or passes `image.ref` through) and exposes the pinned image
    reference.

    The Docker provider comes from the parent's `providers`, configured with `registry_auth`.
    """

    image_ref: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        image: ImageSettings,
        registry: RegistrySettings | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("pytorch-distributed:index:TrainingImage", name, None, opts)
        if not image.build:
            assert image.ref is not None
            if not image.pinned:
                # Allowed (handy while iterating), but a moved tag changes what a restarted pod
                # runs without any diff; the policy pack refuses it where that matters.
                pulumi.log.warn(
                    f"image.ref {image.ref} is not pinned by digest (repo@sha256:...)",
                    resource=self,
                )
            self.image_ref = pulumi.Output.from_input(image.ref)
            self.register_outputs({"imageRef": self.image_ref})
            return
        assert image.repository is not None
        if self.get_provider("docker:index/image:Image") is None:
            # The stack files disable the default provider; say so before the engine does.
            raise ValueError("building the image needs a docker provider in opts.providers")
        registry_args = None
        if registry is not None:
            registry_args = docker.RegistryArgs(
                server=registry.server,
                username=registry.username,
                password=pulumi.Output.secret(registry.password),
            )
        tag = context_tag(REPO_ROOT / image.context, REPO_ROOT / image.dockerfile, image.build_args)
        built = docker.Image(
            f"{name}-image",
            image_name=f"{image.repository}:{tag}",
            build=docker.DockerBuildArgs(
                # Relative to the project directory, where Pulumi runs the program: state then
                # holds the same paths on every checkout, so a different clone path never shows
                # up as a diff.
                context=image.context,
                dockerfile=image.dockerfile,
                platform=image.platform,
                args=image.build_arguments,
                builder_version=BUILDER_VERSIONS[image.builder],
            ),
            registry=registry_args,
            skip_push=False,
            opts=pulumi.ResourceOptions(
                parent=self, hooks=BuildLeftovers(f"{name}-image").binding()
            ),
        )
        # The lookup waits for the push: `repo_digest` is known only once the image is pushed,
        # so a preview that would rebuild leaves the digest unknown instead of asking the
        # registry for a tag that does not exist yet.
        pushed_tag = pulumi.Output.all(built.image_name, built.repo_digest).apply(
            lambda values: values[0]
        )
        pushed = docker.get_registry_image_output(
            name=pushed_tag, opts=pulumi.InvokeOutputOptions(parent=self)
        )
        self.image_ref = pulumi.Output.concat(image.repository, "@", pushed.sha256_digest)
        self.register_outputs({"imageRef": self.image_ref})
