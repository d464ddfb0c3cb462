"""Write the Kubernetes objects a stack would apply as YAML, without Pulumi, cluster or Docker.

    python -m tools.render --stack prod --out DIR

Built from the same settings validation and `stack_objects` (which objects, which manifests) as
the Pulumi program, so a review of the YAML is a review of what `pulumi up` applies. Offline
stand-ins:
* the registry password is always the marker `<redacted>` (whatever the stack file holds), so
  the Secret's data never carries a real credential;
* an image the stack builds is shown as its repository with a placeholder digest of 64 zeros
  (the real digest exists only after the build); a prebuilt `image.ref` is shown as is.

One file per object, `NN-<kind>-<name>.yaml` in apply order, keys in the builders' order (which
is deterministic), so re-rendering after a change gives a small, readable diff. Files from an
earlier render that the stack no longer produces are removed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from builders.stack_objects import stack_objects
from settings.stack import REDACTED, StackSettings
from tools.stack_cli import add_stack_arguments, stack_settings

PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
RENDERED_SUFFIX = ".yaml"


def image_reference(settings: StackSettings) -> str:
    if settings.image.build:
        assert settings.image.repository is not None  # settings validation guarantees it
        return f"{settings.image.repository}@{PLACEHOLDER_DIGEST}"
    assert settings.image.ref is not None
    return settings.image.ref


def file_name(position: int, manifest: Mapping[str, Any]) -> str:
    kind = str(manifest["kind"]).lower()
    return f"{position:02d}-{kind}-{manifest['metadata']['name']}{RENDERED_SUFFIX}"


def to_yaml(manifest: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(manifest), sort_keys=False, default_flow_style=False, width=100)


def render(settings: StackSettings, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    objects = stack_objects(settings, image=image_reference(settings), password=REDACTED)
    for position, manifest in enumerate(objects.in_apply_order(), start=1):
        path = out / file_name(position, manifest)
        path.write_text(to_yaml(manifest), encoding="utf-8")
        written.append(path)
    for stale in sorted(out.glob(f"[0-9][0-9]-*{RENDERED_SUFFIX}")):
        if stale not in written:
            stale.unlink()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.render",
        description="Write the manifests a stack would apply, one YAML file per object.",
    )
    add_stack_arguments(parser)
    parser.add_argument("--out", required=True, type=Path, help="directory for the YAML files")
    args = parser.parse_args(argv)
    if (settings := stack_settings(args)) is None:
        return 2
    try:
        written = render(settings, args.out)
    except OSError as error:  # --out is a file, or cannot be created or written
        print(
            f"error: --out = '{args.out}': {error.strerror or error}: {error.filename}",
            file=sys.stderr,
        )
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
