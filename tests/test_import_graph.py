"""The project's import graph (ARCHITECTURE.md): no circles among module-level imports, and no
import that runs back up the layers (settings -> builders -> readers -> components; trainer loop
-> store -> storage -> disk; this machine's ledgers -> the one-machine cluster -> its command
line; tools and tests on top).

Read from the source with ast, not by importing, so the check costs nothing and sees every module.
Imports under `if TYPE_CHECKING:` are annotations only and do not count; imports inside a
function (the job API and checkpoint storage registries') run late and are counted by the layer
check only. In the settings, the builders, the readers, the components, `machine` and the
cluster every module has a layer. In `machine` and the cluster circles are looked for with the
late imports too: a component the plane runs (cluster/plane_component.py) never imports the
plane.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

PACKAGES = (
    "settings",
    "builders",
    "readers",
    "components",
    "trainer",
    "machine",
    "cluster",
    "tools",
    "policy",
    "bench",
    "tests",
)
# What each top-level package may import from the project; a package always imports itself.
# The settings need nothing of the project; the pure builders build from the settings; the
# cluster readers read what the builders' job APIs name; the components (the Pulumi program,
# which must not need the tools or the tests) build on all three. The trainer ships alone in the
# image; `machine` (the port ledger, the process table, the container engine's settings) needs
# nothing of the project; the one-machine cluster builds on the settings', builders' and
# readers' constants and `machine`, never on the components or the user commands in tools/;
# tools may ask the trainer's own code (run_local's preflight).
ALLOWED = {
    "settings": set(),
    "builders": {"settings"},
    "readers": {"settings", "builders"},
    "components": {"settings", "builders", "readers"},
    "trainer": set(),
    "policy": set(),
    "machine": set(),
    "cluster": {"settings", "builders", "readers", "machine"},
    "tools": {"settings", "builders", "readers", "components", "trainer", "machine", "cluster"},
    "bench": {"trainer", "tools", "machine"},
    "tests": set(PACKAGES) - {"tests"},  # every one
}
# Layers inside a package, lowest first: a module never imports one of a higher layer. Setting
# values -> checkpoint storages (the settings validate through them) -> the stack's settings ->
# the typed arguments and their generator; shared builders -> job APIs -> which objects a stack
# has; conditions -> a queue's state -> a job's state -> the watch that reads them; the
# components' hooks -> the job's resource that every job API's component declares -> the
# components -> TrainingEnvironment composing them; the trainer's disk writer -> a run's storage
# (the interface and its backends) -> checkpoint store, metrics and command line -> resume
# decision and restore -> training loop; which stacks are the cluster's (standard library only)
# -> the cluster's processes, node network and Docker API -> the seam between the plane and a
# component it runs -> the components (Trainer, the real node; then Kueue, which reuses
# Trainer's certificates) -> the control plane -> the background service -> its command line.
LAYERS = (
    (
        ("settings.values",),
        ("settings.checkpoint_storage",),
        ("settings.stack",),
        ("settings.args", "settings.args_codegen"),
    ),
    (
        ("builders.manifests",),
        ("builders.job_apis",),
        ("builders.network_policy",),
        ("builders.pod_monitor",),
        ("builders.stack_objects",),
    ),
    (
        ("readers.conditions", "readers.progress_report"),
        ("readers.queue_state",),
        ("readers.job_state",),
        ("readers.job_watch",),
    ),
    (
        (
            "components.interruption",
            "components.build_leftovers",
            "components.job_outcome",
            "components.pod_admission",
            "components.previous_run",
        ),
        ("components.watched_job",),
        (
            "components.training_image",
            "components.checkpoint_volume",
            "components.stack_secret",
            "components.job_network",
            "components.job_metrics",
            "components.pytorch_job",
            "components.train_job",
        ),
        ("components.training_environment",),
    ),
    (
        ("trainer.durable_file", "trainer.checkpoint_schema", "trainer.report"),
        ("trainer.storage", "trainer.progress_line", "trainer.prometheus_metrics"),
        ("trainer.checkpoint", "trainer.metrics", "trainer.cli", "trainer.tensorboard_log"),
        ("trainer.async_writer", "trainer.resume", "trainer.restore", "trainer.progress"),
        ("trainer.loop",),
    ),
    (("machine.ports", "machine.procs", "machine.containers", "machine.engine_api"),),
    (
        ("cluster.stacks", "cluster.volumes"),
        ("cluster.processes", "cluster.node_network", "cluster.docker_api"),
        ("cluster.plane_component", "cluster.network_policy_agent"),
        ("cluster.trainer_plane", "cluster.real_node"),
        ("cluster.kueue_plane",),
        ("cluster.control_plane",),
        ("cluster.service",),
        ("cluster.__main__",),
    ),
)
# Packages whose every module has a layer above.
LAYERED = ("settings", "builders", "readers", "components", "machine", "cluster")
# Packages whose circles count late imports too (the registries of job APIs and checkpoint
# storages import their modules late, and those modules import the registry: not these).
LATE_CIRCLES = ("machine", "cluster")


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


def upward_imports(imports: dict[str, set[str]]) -> list[str]:
    """`module -> other` for each import (module -> what it imports) of a package its package may
    not import, or of a module in a higher layer of its own package."""
    upward = []
    for name, others in sorted(imports.items()):
        package = name.split(".")[0]
        for other in sorted(others):
            other_package = other.split(".")[0]
            if other_package != package and other_package not in ALLOWED[package]:
                upward.append(f"{name} -> {other}")
            for layers in LAYERS:
                for lower, layer in enumerate(layers):
                    above = tuple(module for higher in layers[lower + 1 :] for module in higher)
                    if within(name, layer) and within(other, above):
                        upward.append(f"{name} -> {other}")
    return upward


def without_layer(names: list[str]) -> list[str]:
    """The modules of a LAYERED package (its __init__ aside) in none of its layers."""
    layered = tuple(module for layers in LAYERS for layer in layers for module in layer)
    return [
        name
        for name in sorted(names)
        if name.split(".")[0] in LAYERED and "." in name and not within(name, layered)
    ]


def test_module_level_imports_form_no_circle() -> None:
    modules = project_modules()
    graph = {
        name: imported(path, modules, module_level=True) - {name} for name, path in modules.items()
    }
    assert circles(graph) == []


def test_machine_and_the_cluster_form_no_circle_with_late_imports() -> None:
    """An import inside a function closes a circle as well, only later (the control plane and
    the real node once imported each other so)."""
    modules = project_modules()
    graph = {
        name: {
            other
            for other in imported(path, modules, module_level=False) - {name}
            if other.split(".")[0] in LATE_CIRCLES
        }
        for name, path in modules.items()
        if name.split(".")[0] in LATE_CIRCLES
    }
    assert circles(graph) == []


def test_every_module_of_a_layered_package_has_a_layer() -> None:
    assert without_layer(list(project_modules())) == []


def test_no_import_runs_up_the_layers() -> None:
    modules = project_modules()
    imports = {name: imported(path, modules, module_level=False) for name, path in modules.items()}
    assert upward_imports(imports) == []


def test_the_check_sees_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The checks above would pass on an empty graph; they must see what they look for."""
    assert circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    modules = project_modules()
    assert "settings.stack" in imported(modules["builders.manifests"], modules, module_level=True)
    assert "trainer.checkpoint" in modules and "tools.run_local" in modules
    assert within("builders.job_apis.trainjob", ("builders.job_apis",))
    assert not within("trainer.checkpoint_schema", ("trainer.checkpoint",))
    # An import inside a function is late: seen by the layer check and the layered circle check.
    late = tmp_path / "late.py"
    late.write_text("def start():\n    from cluster.control_plane import ControlPlane\n")
    assert imported(late, modules, module_level=False) == {"cluster.control_plane"}
    assert imported(late, modules, module_level=True) == set()
    # A component that imports the plane runs up; a plane that imports a component does not.
    assert upward_imports({"cluster.real_node": {"cluster.control_plane"}}) == [
        "cluster.real_node -> cluster.control_plane"
    ]
    assert upward_imports({"cluster.kueue_plane": {"cluster.plane_component"}}) == []
    # The cluster is below the user commands.
    assert upward_imports({"cluster.docker_api": {"tools.pulumi_run"}}) == [
        "cluster.docker_api -> tools.pulumi_run"
    ]
    assert without_layer(["cluster", "cluster.stacks", "cluster.new_part"]) == ["cluster.new_part"]
    # The rooms: settings -> builders -> readers -> components, and the cluster beside the
    # components, never on them.
    assert upward_imports({"settings.stack": {"builders.manifests"}}) == [
        "settings.stack -> builders.manifests"
    ]
    assert upward_imports({"builders.job_apis": {"readers.conditions"}}) == [
        "builders.job_apis -> readers.conditions"
    ]
    assert upward_imports({"readers.job_watch": {"components.job_outcome"}}) == [
        "readers.job_watch -> components.job_outcome"
    ]
    assert upward_imports({"cluster.kueue_plane": {"components.training_environment"}}) == [
        "cluster.kueue_plane -> components.training_environment"
    ]
    assert upward_imports({"readers.queue_state": {"builders.manifests"}}) == []
    assert upward_imports({"readers.conditions": {"readers.job_state"}}) == [
        "readers.conditions -> readers.job_state"
    ]
    assert upward_imports({"components.watched_job": {"components.pytorch_job"}}) == [
        "components.watched_job -> components.pytorch_job"
    ]
    assert without_layer(["settings", "settings.stack", "readers.new_reader"]) == [
        "readers.new_reader"
    ]
