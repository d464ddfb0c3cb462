"""Training images are pinned by digest, so every node of a job (and every restart) runs the same
bits; a tag can move between the Master's pull and a Worker's pull."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .jobs import job_view
from .model import is_unknown

DIGEST_REFERENCE: Final = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")


def image_pinned_by_digest(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    view = job_view(resource_type)
    if view is None:
        return []
    messages: list[str] = []
    for container in view.containers(props, True):
        image = container.spec.get("image")
        # Unknown during preview when the image is built by this update; `pulumi up` checks it
        # again with the real digest before the job is created.
        if is_unknown(image):
            continue
        problem = image_reference_problem(image)
        if problem:
            messages.append(f"{container.field_path('image')} {problem}")
    return messages


def image_reference_problem(image: Any) -> str | None:
    """Why an image reference is not a digest pin, or None when it is one."""
    if not isinstance(image, str) or not image:
        return "is missing"
    if DIGEST_REFERENCE.match(image):
        return None
    last_segment = image.rsplit("/", 1)[-1]
    tag = last_segment.split(":", 1)[1] if ":" in last_segment else None
    if tag is None or tag == "latest":
        return f"{image!r} uses the moving tag 'latest'; pin it by digest (name@sha256:<64 hex>)"
    return f"{image!r} is a bare tag; pin it by digest (name@sha256:<64 hex>)"
