"""trainer/Dockerfile's pip pins: each `name==version` the image installs is requirements-dev.txt's
pin, the one the tests here run against, and the stand-in base image (scripts/build-base-image.sh)
has every one of them, so an image built on it needs no network."""

from __future__ import annotations

import importlib.metadata
import re

from tests.conftest import REPO_ROOT

DOCKERFILE = REPO_ROOT / "trainer" / "Dockerfile"
REQUIREMENTS = REPO_ROOT / "requirements-dev.txt"
BASE_IMAGE_SCRIPT = REPO_ROOT / "scripts" / "build-base-image.sh"
PIN = re.compile(r"(?<![\w.=-])([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)")


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): tensorboardX is tensorboardx."""
    return re.sub(r"[-_.]+", "-", name).lower()


def dockerfile_pins() -> dict[str, str]:
    """Every `name==version` in the Dockerfile's instructions (its comments left out), by the
    name as written."""
    instructions = "\n".join(
        line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")
    )
    return dict(PIN.findall(instructions))


def requirement_pins() -> dict[str, tuple[str, str]]:
    """requirements-dev.txt's `name==version` lines: normalized name -> (name as written,
    version)."""
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.split("#")[0].strip())
        if match:
            pins[normalized(match.group(1))] = (match.group(1), match.group(2))
    return pins


def test_the_dockerfile_pins_are_found() -> None:
    """The parse itself: the image installs boto3 for object storage, and nothing else is read
    as a pin (a test of no pins would hold anything equal)."""
    pins = dockerfile_pins()
    assert "boto3" in pins
    assert all(not name[0].isdigit() for name in pins)


def test_every_pin_the_image_installs_is_requirements_devs() -> None:
    required = requirement_pins()
    for name, version in dockerfile_pins().items():
        assert normalized(name) in required, f"{name}=={version}: requirements-dev.txt has no pin"
        assert required[normalized(name)][1] == version, (
            f"trainer/Dockerfile installs {name}=={version}, requirements-dev.txt pins "
            f"{required[normalized(name)][1]}"
        )


def test_the_tests_run_against_what_the_image_installs() -> None:
    for name, version in dockerfile_pins().items():
        assert importlib.metadata.version(name) == version, name


def test_the_base_image_has_every_pin_the_image_installs() -> None:
    """build-base-image.sh installs requirements-dev.txt's lines that its `grep -E` pattern
    matches, and counts them: the pattern must match each of the Dockerfile's names as
    requirements-dev.txt spells it, and the count must be the pattern's."""
    script = BASE_IMAGE_SCRIPT.read_text()
    found = re.search(r"grep -E '\^\(([^)]*)\)=='", script)
    assert found is not None, "build-base-image.sh no longer selects its pins with grep -E"
    names = found.group(1).split("|")
    counted = re.search(r"-eq (\d+) \]\]", script)
    assert counted is not None and int(counted.group(1)) == len(names)
    required = requirement_pins()
    pattern = re.compile(rf"^({'|'.join(names)})==")
    for name in dockerfile_pins():
        written = required[normalized(name)][0]
        assert pattern.match(f"{written}=="), (
            f"build-base-image.sh's pins leave out {written} (trainer/Dockerfile installs it)"
        )
