"""What a stack's image is built from, for podman: the arguments of `podman build` and the local
image's name, so `make image STACK=...` (scripts/build-image.sh) builds exactly what the stack's
TrainingImage builds (`image.context`, `image.dockerfile`, `image.buildArgs`; the script gives
BASE_IMAGE itself, its local stand-in for the NGC image).

    python -m tools.stack_image --stack STACK           # the build's arguments, one per line
    python -m tools.stack_image --stack STACK --name    # the local image's name

Exit code 2, one line, for a stack that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from settings.stack import StackSettings
from settings.values import BASE_IMAGE_ARG
from tools.local_backends.container import stack_image
from tools.stack_cli import add_stack_arguments, stack_settings


def build_arguments(settings: StackSettings) -> list[str]:
    """`podman build` arguments, paths relative to the project: the Dockerfile, the build
    arguments besides BASE_IMAGE, and the context last."""
    image = settings.image
    args = ["--file", image.dockerfile]
    for name, value in image.build_arguments.items():
        if name != BASE_IMAGE_ARG:
            args += ["--build-arg", f"{name}={value}"]
    return [*args, image.context]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.stack_image",
        description="Print what a stack's image is built from (podman build arguments, one per "
        "line), or with --name the local image's name.",
    )
    add_stack_arguments(parser)
    parser.add_argument("--name", action="store_true", help="print the local image's name")
    args = parser.parse_args(argv)
    if (settings := stack_settings(args)) is None:
        return 2
    lines = [stack_image(args.stack, settings)] if args.name else build_arguments(settings)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
