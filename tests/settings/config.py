"""A stack's config as the settings tests write it: the least a stack needs, and that with some
sections changed."""

from __future__ import annotations

from typing import Any

MINIMAL: dict[str, Any] = {"image": {"repository": "registry.example.com/ml/trainer"}}


def with_values(**sections: Any) -> dict[str, Any]:
    values = {
        key: dict(value) if isinstance(value, dict) else value for key, value in MINIMAL.items()
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values
