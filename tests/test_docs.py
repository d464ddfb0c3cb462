"""README.md and the docs site (docs/, mkdocs.yml): every command they show works as written, every
generated block is what its source says now, every version they name is the pinned one, and the
site builds with no warning.

A command is checked by what would make it fail: a make target or variable the Makefile lacks, a
module that is not there or a flag its parser does not take, a script or path that does not
exist, a setting or stack output that is not declared. Commands are read from the sh/bash
fences and from inline code that starts like a command (`make ...`, `python -m ...`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.docs_blocks import GENERATORS, documents, regenerated
from tests.test_makefile import phony_targets

FENCE = re.compile(r"^```(?:sh|bash)\n(.*?)^```", re.M | re.S)
INLINE = re.compile(
    r"(?<!`)`((?:make|\.venv/bin/python -m|python -m|\.venv/bin/torchrun|pulumi config set|"
    r"pulumi stack output|scripts/)[^`]*)`(?!`)"
)
HEREDOC = re.compile(r"<<-?'?(\w+)'?")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
REPO_PATH = re.compile(
    r"^(?:scripts|tools|trainer|bench|examples|policy|settings|builders|readers|components|tests"
    r"|docs)/"
)
README_MAX_LINES = 220
MAKERS = ("mkdir", "touch", "rm")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")


def _relative(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def _fence_lines(body: str) -> Iterator[str]:
    """The logical lines of a shell fence: continuations joined, heredoc bodies left out."""
    lines = iter(body.replace("\\\n", " ").splitlines())
    for line in lines:
        yield line
        if heredoc := HEREDOC.search(line):
            for inner in lines:
                if inner.strip() == heredoc.group(1):
                    break


def shown_commands() -> list[tuple[str, str]]:
    """(where, command line) for every command in README.md and docs/."""
    found = []
    for path in documents():
        text = path.read_text(encoding="utf-8")
        for fence in FENCE.finditer(text):
            found += [(_relative(path), line) for line in _fence_lines(fence.group(1))]
        # Inline spans may show alternatives and optional parts: `make preview|up STACK=...`.
        found += [(_relative(path), span.group(1)) for span in INLINE.finditer(text)]
    return [(where, line) for where, line in found if line.strip()]


def _simple_commands(line: str) -> Iterator[list[str]]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an inline span cut mid-quote
        words = line.split()
    command: list[str] = []
    for word in [*words, ";"]:
        if word in (";", "&&", "||", "|", "&"):
            while command and ASSIGNMENT.match(command[0]):
                command.pop(0)
            if command:
                yield command
            command = []
        else:
            command.append(word)


def _words(command: list[str]) -> list[str]:
    """The words of a synopsis without its brackets, each alternative of `a|b` on its own."""
    words = []
    for word in command:
        word = word.strip("[]")
        if word and word != "...":
            words += word.split("|") if not word.startswith("-") else [word.split("|")[0]]
    return words


@functools.cache
def make_variables() -> set[str]:
    text = (REPO_ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Z][A-Z0-9_]*) \?=", text, re.M))


@functools.cache
def module_help(module: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, f"python -m {module} --help failed: {done.stderr[-500:]}"
    return done.stdout


@functools.cache
def trainer_flags() -> set[str]:
    from trainer.cli import build_parser

    return {name for action in build_parser()._actions for name in action.option_strings}


@functools.cache
def torchrun_flags() -> set[str]:
    from torch.distributed.run import get_args_parser

    return {name for action in get_args_parser()._actions for name in action.option_strings}


@functools.cache
def setting_keys() -> dict[str, str]:
    """Each declared key -> what it allows, from the settings table's declarations."""
    from settings.stack import settings_table_markdown

    rows = [row.split(" | ") for row in settings_table_markdown().splitlines()[2:]]
    return {row[0].strip("| `"): row[2] for row in rows}


@functools.cache
def stack_output_names() -> set[str]:
    from pydantic.alias_generators import to_camel

    from components.training_environment import StackOutputs

    return {to_camel(name) for name in StackOutputs.__dataclass_fields__}


def _flags(words: list[str]) -> list[str]:
    return [word.split("=")[0] for word in words if word.startswith("--") and len(word) > 2]


def config_set_problems(args: list[str]) -> list[str]:
    """What `pulumi config set ARGS` would get wrong: a key the stack does not declare."""
    values = [
        w
        for i, w in enumerate(args)
        if not w.startswith("-") and not (i > 0 and args[i - 1] == "--stack")
    ]
    key = values[0].removeprefix("pytorch-distributed:") if values else ""
    keys = setting_keys()
    if (
        key
        and key not in keys
        and not any(
            key.startswith(f"{declared}.") and allowed.startswith("an object of")
            for declared, allowed in keys.items()
        )
    ):
        return [f"pulumi config set {key}: no such setting"]
    return []


def problems(command: list[str]) -> list[str]:
    """What would make `command` fail as the docs show it; empty when nothing would."""
    found = []
    program, *args = command
    words = _words(args)
    # What a command makes (its last argument to cp, mv, mkdir, touch) need not exist yet.
    inputs = words[:-1] if program in ("cp", "mv") else [] if program in MAKERS else words
    for word in [program, *inputs]:
        shown = REPO_PATH.match(word) and "<" not in word and "*" not in word
        if shown and not (REPO_ROOT / word.rstrip(".,:;)")).exists():
            found.append(f"{word}: no such file in the repository")
    if REPO_PATH.match(program) and not os.access(REPO_ROOT / program, os.X_OK):
        found.append(f"{program}: not executable")
    if program == "make":
        for word in words:
            if ASSIGNMENT.match(word):
                if (name := word.split("=")[0]) not in make_variables():
                    found.append(f"make variable {name}: the Makefile does not declare it")
                # `make config CONFIG_ARGS='set --path KEY VALUE'`: what follows `pulumi config`.
                config = shlex.split(word.split("=", 1)[1]) if name == "CONFIG_ARGS" else []
                if config[:1] == ["set"]:
                    found += config_set_problems(config[1:])
            elif not word.startswith("-") and word not in phony_targets():
                found.append(f"make {word}: no such target")
    elif Path(program).name.startswith("python") and "-m" in words:
        module = words[words.index("-m") + 1]
        if importlib.util.find_spec(module) is None:
            found.append(f"python -m {module}: no such module")
        else:
            rest = words[words.index("-m") + 2 :]
            known = trainer_flags() if module == "trainer" else None
            for flag in _flags(rest):
                if flag not in (known if known is not None else module_help(module)):
                    found.append(f"python -m {module} {flag}: the module takes no such flag")
    elif Path(program).name == "torchrun":
        split = words.index("-m") if "-m" in words else len(words)
        found += [
            f"torchrun {f}: no such flag"
            for f in _flags(words[:split])
            if f not in torchrun_flags()
        ]
        if words[split + 1 : split + 2] == ["trainer"]:
            found += [
                f"python -m trainer {flag}: no such flag"
                for flag in _flags(words[split + 2 :])
                if flag not in trainer_flags()
            ]
    elif program == "pulumi" and words[:2] == ["config", "set"]:
        found += config_set_problems(words[2:])
    elif program == "pulumi" and words[:2] == ["stack", "output"]:
        names = [w for w in words[2:] if not w.startswith("-") and not PLACEHOLDER.match(w)]
        found += [f"stack output {n}: not declared" for n in names if n not in stack_output_names()]
    return found


COMMANDS = shown_commands()


def test_the_docs_show_commands() -> None:
    programs = {command[0] for _, line in COMMANDS for command in _simple_commands(line)}
    assert {"make", "pulumi", ".venv/bin/python", "scripts/kind-up.sh"} <= programs


@pytest.mark.parametrize(
    ("where", "line"), COMMANDS, ids=[f"{where}: {line[:60]}" for where, line in COMMANDS]
)
def test_every_command_shown_works_as_written(where: str, line: str) -> None:
    found = [problem for command in _simple_commands(line) for problem in problems(command)]
    assert not found, f"{where}: `{line}`: " + "; ".join(found)


def test_the_command_check_catches_what_would_fail() -> None:
    """The checker itself: each of these is a mistake a page could make."""
    for line in (
        "make upp STACK=dev",
        "make up STAK=dev",
        ".venv/bin/python -m tools.run_local --stak dev",
        ".venv/bin/python -m tools.no_such_tool",
        "scripts/no-such.sh",
        ".venv/bin/torchrun --standalone -m trainer 4 2 --batchsize 3",
        "pulumi config set --path pytorch-distributed:job.epochs 3",
        "make config STACK=dev CONFIG_ARGS='set --path pytorch-distributed:job.epochs 3'",
        "pulumi stack output logCommand",
    ):
        assert [p for command in _simple_commands(line) for p in problems(command)], line
    assert not problems(["make", "up", "STACK=dev", "PULUMI_ARGS=--yes"])
    assert not problems(["pulumi", "config", "set", "--path", "labels.team", "vision"])
    assert not problems(
        ["make", "config", "STACK=dev", "CONFIG_ARGS=set --path pytorch-distributed:job.nodes 3"]
    )


def test_every_generated_block_is_what_its_source_says_now() -> None:
    stale = [
        _relative(path)
        for path in documents()
        if regenerated(text := path.read_text(encoding="utf-8")) != text
    ]
    assert not stale, (
        f"{stale}: generated blocks differ from their sources; "
        "run `.venv/bin/python -m tests.docs_blocks`"
    )


def test_every_generator_has_a_block_in_the_docs() -> None:
    text = "".join(path.read_text(encoding="utf-8") for path in documents())
    missing = [name for name in GENERATORS if f"<!-- {name}:start" not in text]
    assert not missing, f"no page shows the generated blocks {missing}"


def _pinned(variable: str) -> str:
    tools = (REPO_ROOT / "scripts" / "e2e-tools.sh").read_text()
    match = re.search(rf"^{variable}=(\S+)$", tools, re.M)
    assert match is not None, variable
    return match.group(1)


def _pip_pin(package: str, requirements: str) -> str:
    match = re.search(
        rf"^{re.escape(package)}==(\S+)$", (REPO_ROOT / requirements).read_text(), re.M
    )
    assert match is not None, package
    return match.group(1)


def version_mentions() -> dict[str, str]:
    """A pattern of prose naming a pinned tool with a version -> the pinned version."""
    return {
        r"training operator v?(\d+\.\d+\.\d+)": _pinned("TRAINING_OPERATOR_VERSION"),
        r"OPERATOR_REF`, default `v(\d+\.\d+\.\d+)": _pinned("TRAINING_OPERATOR_VERSION"),
        r"Trainer (?:v2 \()?v?(\d+\.\d+\.\d+)": _pinned("TRAINER_VERSION"),
        r"JobSet v?(\d+\.\d+\.\d+)": _pinned("JOBSET_VERSION"),
        r"Kueue v?(\d+\.\d+\.\d+)": _pinned("KUEUE_VERSION"),
        r"Kubernetes (\d+\.\d+(?:\.\d+)?)": _pinned("KUBERNETES_VERSION"),
        r"pulumi-kubernetes (\d+\.\d+(?:\.\d+)?)": _pip_pin(
            "pulumi-kubernetes", "requirements.txt"
        ),
        r"pulumi-docker (\d+\.\d+(?:\.\d+)?)": _pip_pin("pulumi-docker", "requirements.txt"),
        r"pulumi-policy (\d+\.\d+(?:\.\d+)?)": _pip_pin("pulumi-policy", "policy/requirements.txt"),
        r"Pulumi CLI (\d+\.\d+\.\d+)": _pinned("PULUMI_VERSION"),
        r"kwok (\d+\.\d+\.\d+)": _pinned("KWOK_VERSION"),
        r"CoreDNS (\d+\.\d+\.\d+)": _pinned("COREDNS_VERSION"),
        r"etcd (\d+\.\d+\.\d+)": _pinned("ETCD_VERSION"),
        r"torch==(\d+\.\d+\.\d+)": _pip_pin("torch", "requirements-dev.txt"),
    }


def test_every_version_the_docs_name_is_the_pinned_one() -> None:
    wrong = []
    for path in documents():
        text = " ".join(path.read_text(encoding="utf-8").split())
        for pattern, pinned in version_mentions().items():
            for match in re.finditer(pattern, text):
                if not pinned.lstrip("v").startswith(match.group(1)):
                    wrong.append(f"{_relative(path)}: {match.group(0)!r}, pinned {pinned}")
    assert not wrong, wrong


def test_the_readme_is_one_page() -> None:
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move detail into docs/"


def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "index.html").is_file()
