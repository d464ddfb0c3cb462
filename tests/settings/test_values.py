"""The grammar of setting values (settings/values.py): quantities, spellings a lax parser would
take, labels; read through the settings, as a stack's config is."""

from __future__ import annotations

import re
from typing import Any

import pytest

from settings.stack import SettingsError, parse_settings
from settings.values import quantity_value
from tests.settings.config import with_values


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("2", 2), ("1Gi", 2**30), ("10Ti", 10 * 2**40), ("1k", 1000), ("1e3", 1000)],
)
def test_quantity_value(text: str, value: float) -> None:
    assert float(quantity_value(text)) == pytest.approx(value)


def test_numeric_quantities_from_yaml() -> None:
    settings = parse_settings(with_values(job={"cpu": 0.5, "memory": 1073741824}))
    assert (settings.job.cpu, settings.job.memory) == ("0.5", "1073741824")
    assert parse_settings(with_values(job={"cpu": 2})).job.cpu == "2"


@pytest.mark.parametrize(
    ("section", "field", "value"),
    [
        ("job", "name", "ddp-dev\n"),
        ("checkpoints", "size", "10Gi\n"),
        ("job", "cpu", "2\n"),
    ],
)
def test_trailing_newline_is_not_a_valid_value(section: str, field: str, value: str) -> None:
    with pytest.raises(SettingsError, match=rf"{section}\.{field}"):
        parse_settings(with_values(**{section: {field: value}}))


def test_labels_are_checked_like_kubernetes_labels() -> None:
    settings = parse_settings(with_values(labels={"team": "vision", "example.com/cost": "ml-42"}))
    assert settings.labels == {"team": "vision", "example.com/cost": "ml-42"}
    for name, value, named in [
        ("team", "a" * 64, "labels.team"),
        ("team", "-vision", "labels.team"),
        ("Bad_Prefix/team", "x", "labels.Bad_Prefix/team"),
        ("app.kubernetes.io/name", "mine", "labels.app.kubernetes.io/name"),
    ]:
        with pytest.raises(SettingsError, match=re.escape(f"pytorch-distributed:{named}")):
            parse_settings(with_values(labels={name: value}))
    with pytest.raises(SettingsError, match="labels = 'team'"):
        parse_settings(with_values(labels="team"))


@pytest.mark.parametrize(
    ("section", "field", "value"),
    [
        ("job", "nodes", 2.0),  # a float is a mistake, not an integer
        ("job", "totalEpochs", False),
        ("checkpoints", "retainOnDestroy", 1),
        ("checkpoints", "mountPath", "/checkpoints\n"),
        ("job", "cpu", "1e99999999999"),  # beyond Decimal: refused, not a crash
    ],
)
def test_spellings_lax_parsing_would_let_through_are_refused(
    section: str, field: str, value: Any
) -> None:
    with pytest.raises(SettingsError, match=rf"pytorch-distributed:{section}\.{field} = "):
        parse_settings(with_values(**{section: {field: value}}))
