"""The generated blocks of README.md and docs/: each is written from the one place that decides it.

A block sits between `<!-- NAME:start (generated: python -m tests.docs_blocks) -->` and
`<!-- NAME:end -->` in any Markdown file of the docs; `python -m tests.docs_blocks` rewrites every
block, and tests/test_docs.py fails while one differs from what its source says now. So the
settings table follows settings/stack.py's declarations, the make reference `make help`,
the trainer's flags its argparse parser, the policy table the pack's policies, the versions the
pins, and the stack diagrams and outputs what the program registers and exports under the tests'
mocks (tests/pulumi_harness.py), which is why this module lives beside the harness.
"""

from __future__ import annotations

import argparse
import functools
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.pulumi_harness import ProgramResult, RegisteredResource, run_program

GENERATOR = "python -m tests.docs_blocks"
BLOCK = re.compile(r"<!-- ([a-z0-9-]+):start[^\n]*-->\n(.*?)<!-- \1:end -->", re.S)


def documents() -> list[Path]:
    """Every Markdown file the docs consist of: the README and the site's pages."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def settings_table() -> str:
    from settings.stack import settings_table_markdown

    return settings_table_markdown()


def make_reference() -> str:
    """`make help`'s targets and variables, as two tables."""
    done = subprocess.run(
        ["make", "--no-print-directory", "help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    targets, variables = done.stdout.split("Variables (make TARGET NAME=value):\n", 1)
    target_rows = [
        [f"`make {words[1]}`", " ".join(words[2:])]
        for words in (line.split() for line in targets.splitlines())
        if words[:1] == ["make"]
    ]
    variable_rows = []
    for line in variables.splitlines():
        name, what = line.split(None, 1)
        default = re.search(r" \[([^]]*)\]$", what)
        variable_rows.append(
            [
                f"`{name}`",
                f"`{default.group(1)}`" if default else "—",
                what[: default.start()] if default else what,
            ]
        )
    return (
        _table(["target", "what it does"], target_rows)
        + "\n"
        + _table(["variable", "default", "what it is for"], variable_rows)
    )


def trainer_flags() -> str:
    """`python -m trainer`'s usage and arguments, from the parser the trainer parses with."""
    from trainer.cli import build_parser

    parser = build_parser()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.metavar}`"
        if action.option_strings and action.nargs != 0:
            names += f" `{action.metavar or action.dest.upper()}`"
        help_text = (action.help or "") % {**vars(action), "prog": parser.prog}
        rows.append([names, help_text])
    usage = " ".join(parser.format_usage().split())
    return f"```text\n{usage}\n```\n\n" + _table(["argument", "what it does"], rows)


def policy_table() -> str:
    """The pack's policies: name, level, what each enforces and the settings that opt out."""
    from policy.rules.pack import build_policies

    rows = []
    for policy in build_policies():
        schema = getattr(policy, "config_schema", None)
        options = ", ".join(f"`{key}`" for key in (schema.properties if schema else {}))
        level = str(getattr(policy.enforcement_level, "value", policy.enforcement_level))
        rows.append([f"`{policy.name}`", level, policy.description, options or "—"])
    return _table(["policy", "level", "enforces", "per-stack settings"], rows)


def _pins(path: Path) -> Iterator[tuple[str, str]]:
    for line in path.read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line):
            yield match.group(1), match.group(2)


def versions() -> str:
    """What each version is and the file that pins it (the only place it may change)."""
    rows = []
    for name in (
        "requirements.txt",
        "policy/requirements.txt",
        "requirements-dev.txt",
        "requirements-docs.txt",
    ):
        rows += [
            [f"`{package}`", version, f"`{name}`"] for package, version in _pins(REPO_ROOT / name)
        ]
    tools = (REPO_ROOT / "scripts" / "e2e-tools.sh").read_text()
    rows += [
        [f"`{variable}`", version, "`scripts/e2e-tools.sh`"]
        for variable, version in re.findall(r"^([A-Z_]+_VERSION)=(\S+)$", tools, re.M)
    ]
    from tools import s3_server

    rows.append(
        [
            "`S3PROXY_VERSION` (the tests' S3 server)",
            s3_server.S3PROXY_VERSION,
            "`tools/s3_server.py`",
        ]
    )
    kind = (REPO_ROOT / "scripts" / "kind-up.sh").read_text()
    operator_ref = re.search(r"\$\{OPERATOR_REF:-([^}]+)\}", kind)
    assert operator_ref is not None, "scripts/kind-up.sh lost its OPERATOR_REF default"
    rows.append(
        [
            "`OPERATOR_REF` (the kind cluster's training operator)",
            operator_ref.group(1),
            "`scripts/kind-up.sh`",
        ]
    )
    dockerfile = (REPO_ROOT / "trainer" / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.M)
    assert base is not None, "trainer/Dockerfile lost its BASE_IMAGE default"
    rows.append(
        ["`BASE_IMAGE` (the training image's default base)", base.group(1), "`trainer/Dockerfile`"]
    )
    return _table(["what", "version", "pinned in"], rows)


@functools.cache
def _program(stack: str) -> ProgramResult:
    secrets = {"registryPassword": "example"} if stack == "prod" else None
    result = run_program(stack, secrets=secrets)
    assert result.error is None, f"the program failed for stack {stack}: {result.error}"
    return result


def _label(resource_type: str, name: str, inputs: dict) -> str:
    package, _, kind = resource_type.rpartition(":")
    if package == "pulumi:providers":
        return f"provider {kind}"
    kind = kind.rpartition("/")[2]
    # An image's tag is a hash of its build context: it changes with every trainer change.
    image = str(inputs.get("imageName") or "").partition(":ctx-")[0]
    named = (inputs.get("metadata") or {}).get("name") or image
    own = "component " if package.startswith("pytorch-distributed") else ""
    shown = named if isinstance(named, str) else ""
    return f"{own}{kind}<br/>{shown or name}".replace('"', "'")


def stack_resources(stack: str) -> str:
    """A mermaid flowchart of what the program registers for `stack`: each resource under its
    parent (solid: owns), what the job waits for (dotted: uses), and the pods the job's
    controller creates from it (not the program's: dashed)."""
    from builders.job_apis import api_of_job

    result = _program(stack)
    resources = [r for r in result.resources if r.type != "pulumi:pulumi:Stack"]
    by_urn = {resource.urn: resource for resource in resources}

    def depth(resource: RegisteredResource) -> int:
        return 0 if resource.parent not in by_urn else 1 + depth(by_urn[resource.parent])

    # The engine registers in whatever order the program's awaits finish: sort, or the picture
    # would change from one run to the next.
    resources.sort(key=lambda resource: (depth(resource), resource.type, resource.name))
    ids = {resource.urn: f"r{index}" for index, resource in enumerate(resources)}
    lines = ["```mermaid", "flowchart LR"]
    for resource in resources:
        label = _label(resource.type, resource.name, resource.plain_inputs())
        steps: dict[str, list[str]] = {}
        for step, hooks in resource.hooks.items():
            for hook in hooks:
                steps.setdefault(hook, []).append(step.replace("_", " "))
        label += "".join(f"<br/>hook {hook}: {', '.join(on)}" for hook, on in steps.items())
        shape = ('(["', '"])') if resource.custom else ('["', '"]')
        lines.append(f"    {ids[resource.urn]}{shape[0]}{label}{shape[1]}")
    for resource in resources:
        if resource.parent in ids:
            lines.append(f"    {ids[resource.parent]} --> {ids[resource.urn]}")
    for resource in resources:
        if not resource.custom or resource.type.startswith("pulumi:providers"):
            continue
        for dependency in sorted(resource.dependencies, key=lambda urn: ids.get(urn, urn)):
            used = next((r for r in resources if r.urn == dependency), None)
            if used is not None and used.custom and not used.type.startswith("pulumi:providers"):
                lines.append(f"    {ids[resource.urn]} -. uses .-> {ids[dependency]}")
    jobs = [r for r in resources if r.custom and r.type.endswith((":PyTorchJob", ":TrainJob"))]
    for job in jobs:
        inputs = job.plain_inputs()
        runtimes = [r.plain_inputs() for r in resources if r.type.endswith(":TrainingRuntime")]
        pods = api_of_job(inputs).pods(inputs, runtimes[0] if runtimes else None)
        names = "<br/>".join(pod.name for pod in pods)
        lines.append(f'    pods[["pods (the controller\'s)<br/>{names}"]]')
        lines.append(f"    {ids[job.urn]} -. creates .-> pods")
    lines.append("```")
    return "\n".join(lines) + "\n"


def stack_outputs() -> str:
    """`pulumi stack output` for the committed dev and prod stacks."""
    dev, prod = _program("dev").outputs, _program("prod").outputs

    def shown(value: object) -> str:
        # The digest stands in for the registry's answer, a hash of the build context's.
        return "`" + re.sub(r"@sha256:[0-9a-f]{64}", "@sha256:…", str(value)) + "`"

    rows = [
        [f"`{name}`", shown(value.value), shown(prod[name].value)] for name, value in dev.items()
    ]
    return _table(["output", "dev", "prod"], rows)


def restricted_init_container() -> str:
    from builders.job_apis.pytorchjob import RESTRICTED_INIT_CONTAINER_TEMPLATE

    return f"```yaml\n{RESTRICTED_INIT_CONTAINER_TEMPLATE}```\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "settings-table": settings_table,
    "make-reference": make_reference,
    "trainer-flags": trainer_flags,
    "policy-table": policy_table,
    "versions": versions,
    "stack-resources-prod": functools.partial(stack_resources, "prod"),
    "stack-resources-trainjob": functools.partial(stack_resources, "trainjob"),
    "stack-outputs": stack_outputs,
    "restricted-init-container": restricted_init_container,
}


@functools.cache
def generated(name: str) -> str:
    return GENERATORS[name]()


def regenerated(text: str) -> str:
    """`text` with every block it has rewritten from its source; an unknown block name is an
    error, so a typo cannot leave a block that nothing checks."""

    def block(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise KeyError(f"no generator for the docs block {name!r}: {sorted(GENERATORS)}")
        # Blank lines around the content: Markdown reads a line right after an HTML comment as
        # part of the comment's HTML block, which would swallow a fence.
        start = f"<!-- {name}:start (generated: {GENERATOR}) -->"
        return f"{start}\n\n{generated(name)}\n<!-- {name}:end -->"

    return BLOCK.sub(block, text)


def main() -> None:
    argparse.ArgumentParser(
        prog=GENERATOR, description="Rewrite the generated blocks of README.md and docs/."
    ).parse_args()
    for path in documents():
        text = path.read_text(encoding="utf-8")
        if (new := regenerated(text)) != text:
            path.write_text(new, encoding="utf-8")
            print(f"{path.relative_to(REPO_ROOT)}: regenerated")


if __name__ == "__main__":
    main()
