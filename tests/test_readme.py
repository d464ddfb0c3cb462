"""Facts the README states that the code decides: they must not drift apart."""

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


def test_the_readme_gives_the_operator_the_restricted_init_container_template() -> None:
    """What an admin copies into the operator's template file is the template the code holds
    (and the real-node e2e plane runs)."""
    from components.job_apis.pytorchjob import RESTRICTED_INIT_CONTAINER_TEMPLATE

    readme = (REPO_ROOT / "README.md").read_text()
    block = re.search(
        r"<!-- restricted-init-container:start[^\n]*-->\n```yaml\n(.*?)```\n"
        r"<!-- restricted-init-container:end -->",
        readme,
        re.S,
    )
    assert block is not None, "the README lost the operator's init container template"
    assert block.group(1) == RESTRICTED_INIT_CONTAINER_TEMPLATE
