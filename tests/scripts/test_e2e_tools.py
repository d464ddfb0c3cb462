"""scripts/e2e-tools.sh's arguments and the set it names, without building anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools.cluster.control_plane import TOOLS_SCRIPT


def tools_script(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(TOOLS_SCRIPT), *args],
        env={"PATH": "/usr/bin:/bin", "HOME": str(cache), "PD_E2E_CACHE": str(cache)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_print_names_the_sets_bin_directory_and_builds_nothing(tmp_path: Path) -> None:
    printed = tools_script(tmp_path, "--print")
    assert printed.returncode == 0, printed.stderr
    bin_dir = Path(printed.stdout.strip())
    assert bin_dir.name == "bin"
    assert bin_dir.parent.parent == tmp_path / "sets"
    assert not (tmp_path / "tools").exists(), "--print built something"


def test_the_set_changes_with_a_controllers_version(tmp_path: Path) -> None:
    """Kueue is built in one graph with Trainer and JobSet: a new Kueue is a new set."""
    script = TOOLS_SCRIPT.read_text()
    assert script.count("KUEUE_VERSION=0.17.0") == 1
    changed = tmp_path / "e2e-tools.sh"
    changed.write_text(script.replace("KUEUE_VERSION=0.17.0", "KUEUE_VERSION=0.17.1"))
    before = tools_script(tmp_path, "--print").stdout
    after = subprocess.run(
        ["bash", str(changed), "--print"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PD_E2E_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert before != after


def test_an_unknown_argument_is_refused_naming_what_is_allowed(tmp_path: Path) -> None:
    for argument in ("--fast", "--addon"):
        refused = tools_script(tmp_path, argument)
        assert refused.returncode == 2
        assert f"unknown argument '{argument}': expected --print or nothing" in refused.stderr
    assert not (tmp_path / "tools").exists()
