"""The environment of every user command the suite runs (`make ...`, `pulumi ...`): built from
scratch, HOME and PATH and nothing else but the variables README.md's "Environment variables"
section lists for users. The suite therefore cannot run a command in an environment a user would
not have (as it once did with PULUMI_DEBUG_COMMANDS, which hid that `make up` failed for users):
a name the README does not list is refused here, before anything runs, and
tests/test_user_environment.py (in `make test`) checks the suite against the same list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
SECTION = "## Environment variables"

# Where the system's own commands (make, bash, coreutils, util-linux, podman) are: what
# `env -i` with a login shell's PATH gives a user, before the README's additions.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| (.+) \|$")


class UndocumentedVariableError(ValueError):
    """A variable for a user command that README.md does not list for users."""


@cache
def documented_variables(readme: Path = README) -> dict[str, str]:
    """NAME -> what it is for, from the table of the README's "Environment variables" section."""
    text = readme.read_text(encoding="utf-8")
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    rows = (ROW.match(line) for line in text[start : end if end != -1 else None].splitlines())
    return {row.group(1): row.group(2) for row in rows if row is not None}


def user_environment(
    variables: Mapping[str, str], *, home: str, path: str, readme: Path = README
) -> dict[str, str]:
    """HOME, PATH and `variables`, each of which the README must list for users."""
    documented = documented_variables(readme)
    undocumented = sorted(name for name in variables if name not in documented)
    if undocumented:
        raise UndocumentedVariableError(
            f'{", ".join(undocumented)}: not in README.md\'s "{SECTION.lstrip("# ")}", so no '
            "user has it; a user command runs with what a user sets, nothing else"
        )
    return {"HOME": home, "PATH": path, **variables}
