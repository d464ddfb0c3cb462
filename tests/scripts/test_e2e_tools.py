"""scripts/e2e-tools.sh's arguments and the set it names, without building anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cluster.control_plane import TOOLS_SCRIPT


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


def with_one_tool(tmp_path: Path, build_body: str) -> Path:
    """The script with its tools replaced by one made-up tool whose build runs `build_body` (and
    without its Debian packages' install, which needs root and apt)."""
    script = TOOLS_SCRIPT.read_text()
    start = script.index("\nTOOLS=(\n")
    end = script.index("\n)\n", start) + 3
    made_up = (
        f"\nbuild_made_up() {{\n{build_body}\n}}\n"
        'TOOLS=(\n  "made-up-1|made-up|a made-up tool|build_made_up|"\n)\n'
    )
    script = script[:start] + made_up + script[end:]
    assert script.count("\ninstall_debian_packages\n") == 1
    script = script.replace("\ninstall_debian_packages\n", "\n")
    changed = tmp_path / "e2e-tools.sh"
    changed.write_text(script)
    return changed


def run_tools(script: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script)],
        env={"PATH": "/usr/bin:/bin", "HOME": str(cache), "PD_E2E_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


MAKES_ITS_BINARY = (
    '  printf "#!/bin/sh\\n" >"$out/bin/made-up" && chmod +x "$out/bin/made-up"\n'
    '  echo "made-up: here" >"$out/PROVENANCE"'
)


def test_a_failed_step_fails_the_tool_and_caches_nothing(tmp_path: Path) -> None:
    """A step that fails in the middle of a build (a vendored archive not found) ends it: the
    steps after it, which would make the binary, do not run, and no tool is cached as built."""
    script = with_one_tool(tmp_path, "  echo 'archive not found' >&2\n  false\n" + MAKES_ITS_BINARY)
    failed = run_tools(script, tmp_path / "cache")
    assert failed.returncode == 1, failed.stderr
    assert "FAILED: a made-up tool" in failed.stderr
    assert "archive not found" in failed.stderr  # the log's last lines
    assert list((tmp_path / "cache" / "tools").glob("made-up-1-*/PROVENANCE")) == []


def test_a_build_without_its_binary_fails(tmp_path: Path) -> None:
    script = with_one_tool(tmp_path, '  echo "made-up: nothing" >"$out/PROVENANCE"')
    failed = run_tools(script, tmp_path / "cache")
    assert failed.returncode == 1, failed.stderr
    assert "the build made no bin/made-up" in failed.stderr
    assert list((tmp_path / "cache" / "tools").glob("made-up-1-*/PROVENANCE")) == []


def test_a_good_build_is_cached_and_linked_into_the_set(tmp_path: Path) -> None:
    script = with_one_tool(tmp_path, MAKES_ITS_BINARY)
    built = run_tools(script, tmp_path / "cache")
    assert built.returncode == 0, built.stderr
    bin_dir = Path(built.stdout.strip().splitlines()[-1])
    assert (bin_dir / "made-up").exists()
    again = run_tools(script, tmp_path / "cache")
    assert "a made-up tool: cached" in again.stderr
