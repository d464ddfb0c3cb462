"""Facts the README states that the code decides: they must not drift apart. (The operator's
init container template is a generated block of docs/explanation/security.md, checked by
tests/test_docs.py.)"""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT


def test_the_cpu_only_torch_install_pins_the_torch_of_requirements_dev() -> None:
    """The Quickstart's CPU-only wheel must satisfy requirements-dev.txt's pin, or `make` would
    replace it with the 5 GB CUDA build."""
    readme = (REPO_ROOT / "README.md").read_text()
    pinned = re.search(r"^torch==(\S+)$", (REPO_ROOT / "requirements-dev.txt").read_text(), re.M)
    assert pinned is not None
    cpu_install = re.search(r"download\.pytorch\.org/whl/cpu torch==(\S+)", readme)
    assert cpu_install is not None, "the Quickstart lost its CPU-only install line"
    assert cpu_install.group(1) == pinned.group(1)
