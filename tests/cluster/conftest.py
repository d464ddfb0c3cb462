"""What the cluster package's tests share: a real node's namespaces, made and removed around a
test (as root)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.node_network import NodeNamespaces


@pytest.fixture
def namespaces(tmp_path: Path) -> Iterator[NodeNamespaces]:
    """A node's network and mount namespaces, gone afterwards with every mount of them."""
    created = NodeNamespaces(tmp_path / "ns")
    try:
        created.create()
        yield created
    finally:
        created.destroy()
    assert not created.directory.exists()
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
