"""The project's import graph (ARCHITECTURE.md): no circles among module-level imports, and no
import that runs back up the layers (settings -> builders -> components; trainer loop -> store ->
storage -> disk; tools and tests on top).

Read from the source with ast, not by importing, so the check costs nothing and sees every module.
Imports under `if TYPE_CHECKING:` are annotations only and do not count; imports inside a
function (the job API registry's, a test plane's optional real node) run late and are counted by
the layer check only.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

PACKAGES = ("components", "trainer", "tools", "policy", "bench", "tests")
# What each top-level package may import from the project; a package always imports itself.
# The trainer ships alone in the image; components are the Pulumi program, which must not need
# the tools or the tests; tools may ask the trainer's own code (run_local's preflight).
ALLOWED = {
    "components": set(),
    "trainer": set(),
    "policy": set(),
    "tools": {"components", "trainer"},
    "bench": {"trainer", "tools"},
    "tests": {"components", "trainer", "tools", "policy", "bench"},
}
# Layers inside a package, lowest first: a module never imports one of a higher layer. Settings
# -> shared builders -> job APIs -> which objects a stack has -> Pulumi components; the trainer's
# disk writer -> a run's storage (the interface and its backends) -> checkpoint store, metrics
# and command line -> resume decision and restore -> training loop; which stacks are the
# cluster's (standard library only) -> the cluster's processes and node network -> Trainer
# plane -> control plane and its real node -> the Docker API -> the background service -> its
# command line.
LAYERS = (
    (
        ("components.setting_values",),
        ("components.settings",),
        ("components.manifests",),
        ("components.job_apis",),
        ("components.stack_objects",),
        (
            "components.training_environment",
            "components.training_image",
            "components.checkpoint_volume",
            "components.registry_credential",
            "components.environment_secret",
            "components.pytorch_job",
            "components.train_job",
        ),
    ),
    (
        ("trainer.durable_file", "trainer.checkpoint_schema"),
        ("trainer.storage",),
        ("trainer.checkpoint", "trainer.metrics", "trainer.cli"),
        ("trainer.async_writer", "trainer.resume", "trainer.restore"),
        ("trainer.loop",),
    ),
    (
        ("tools.cluster.stacks",),
        ("tools.cluster.processes", "tools.cluster.node_network"),
        ("tools.cluster.trainer_plane",),
        ("tools.cluster.control_plane", "tools.cluster.real_node"),
        ("tools.cluster.docker_api",),
        ("tools.cluster.service",),
        ("tools.cluster.__main__",),
    ),
)


def within(module: str, names: tuple[str, ...]) -> bool:
    """`module` is one of `names` or inside one of them (a package)."""
    return any(module == name or module.startswith(f"{name}.") for name in names)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            if any(part in ("venv", "__pycache__") or part.startswith(".") for part in parts):
                continue
            name = ".".join(parts).removesuffix(".__init__")
            modules[name] = path
    return modules


def imported(path: Path, modules: dict[str, Path], *, module_level: bool) -> set[str]:
    """The project modules `path` imports (`from a import b` counts `a.b` when that is a
    module); `module_level` leaves out imports inside functions."""
    names: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if not (module_level and is_function):
                for field in ("body", "orelse", "handlers", "finalbody"):
                    visit(getattr(node, field, None) or [])

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {name for name in names if name in modules}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                strong(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            strong(module)
    return found


def test_module_level_imports_form_no_circle() -> None:
    modules = project_modules()
    graph = {
        name: imported(path, modules, module_level=True) - {name} for name, path in modules.items()
    }
    assert circles(graph) == []


def test_no_import_runs_up_the_layers() -> None:
    modules = project_modules()
    upward = []
    for name, path in modules.items():
        package = name.split(".")[0]
        for other in imported(path, modules, module_level=False):
            other_package = other.split(".")[0]
            if other_package != package and other_package not in ALLOWED[package]:
                upward.append(f"{name} -> {other}")
            for layers in LAYERS:
                for lower, layer in enumerate(layers):
                    above = tuple(module for higher in layers[lower + 1 :] for module in higher)
                    if within(name, layer) and within(other, above):
                        upward.append(f"{name} -> {other}")
    assert upward == []


def test_the_check_sees_a_circle_and_an_upward_import() -> None:
    """The checks above would pass on an empty graph; they must see what they look for."""
    assert circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    modules = project_modules()
    assert "components.settings" in imported(
        modules["components.manifests"], modules, module_level=True
    )
    assert "trainer.checkpoint" in modules and "tools.run_local" in modules
    assert within("components.job_apis.trainjob", ("components.job_apis",))
    assert not within("trainer.checkpoint_schema", ("trainer.checkpoint",))
