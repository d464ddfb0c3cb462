"""The real-engine suite runs user commands with what README.md's "Environment variables" lists
and nothing else (tests/e2e/user_environment.py). Checked here, in `make test`, without a control
plane: the list's shape, the runner's refusal, the variables the suite's project gives every
command, and every environment variable name written anywhere in tests/e2e."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.e2e.user_environment import (
    SECTION,
    UndocumentedVariableError,
    documented_variables,
    user_environment,
)

E2E = REPO_ROOT / "tests" / "e2e"
# What the hook and a reader take for an environment variable of a user command.
USER_VARIABLE = re.compile(r"^(?:(?:PULUMI|KUBE|DOCKER)_[A-Z_]+|KUBECONFIG|DOCKER_HOST)$")


def test_the_readme_lists_each_variable_once_with_what_it_is_for() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    documented = documented_variables()
    assert {"KUBECONFIG", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_BACKEND_URL", "DOCKER_HOST"} <= set(
        documented
    )
    section = readme[readme.index(f"\n{SECTION}\n") :]
    for name, purpose in documented.items():
        assert section.count(f"| `{name}` |") == 1, name
        assert len(purpose.split()) >= 4, f"{name}: say what it is for"


def test_the_runner_refuses_a_variable_the_readme_does_not_list() -> None:
    with pytest.raises(UndocumentedVariableError, match="PULUMI_DEBUG_COMMANDS"):
        user_environment(
            {"PULUMI_DEBUG_COMMANDS": "true", "KUBECONFIG": "/k"}, home="/h", path="/bin"
        )
    assert user_environment({"KUBECONFIG": "/k"}, home="/h", path="/bin") == {
        "HOME": "/h",
        "PATH": "/bin",
        "KUBECONFIG": "/k",
    }


def test_the_runner_reads_the_list_from_the_readme(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# x\n\n{SECTION}\n\n| variable | what |\n| --- | --- |\n"
        "| `ONLY_THIS` | the one variable this readme lists |\n\n## Next\n"
    )
    assert documented_variables(readme) == {"ONLY_THIS": "the one variable this readme lists"}
    with pytest.raises(UndocumentedVariableError):
        user_environment({"KUBECONFIG": "/k"}, home="/h", path="/bin", readme=readme)


def string_constants(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_every_user_variable_named_in_the_suite_is_in_the_readme() -> None:
    """What the suite could pass to a command is a name written in it: each must be listed."""
    named = {
        f"{path.name}: {value}"
        for path in E2E.glob("*.py")
        for value in string_constants(path)
        if USER_VARIABLE.match(value) and value not in documented_variables()
    }
    assert named == set()


def spreads_the_environment(path: Path) -> list[int]:
    """Lines where a module hands its own environment on (`**os.environ`, `os.environ.copy()`,
    `dict(os.environ)`, `env=os.environ`)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values, strict=True)
            spread = [value for key, value in pairs if key is None]
            if any(ast.unparse(value) == "os.environ" for value in spread):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            text = ast.unparse(node)
            if text in ("os.environ.copy()", "dict(os.environ)") or any(
                k.arg == "env" and ast.unparse(k.value) == "os.environ" for k in node.keywords
            ):
                lines.append(node.lineno)
    return lines


def test_no_module_of_the_suite_hands_its_own_environment_to_a_command() -> None:
    """The test process's environment (CI's, a developer's) never reaches a user command: every
    command's environment is built by the runner, from the README's list."""
    found = {path.name: spreads_the_environment(path) for path in E2E.glob("*.py")}
    assert {name: lines for name, lines in found.items() if lines} == {}
    assert spreads_the_environment(REPO_ROOT / "tests" / "containers.py"), "the check sees it"
