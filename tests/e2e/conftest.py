"""Fixtures of the real-engine suite: the Pulumi CLI with its Python language host and providers, a
control plane, and the project directory the CLI runs in.

Two ways to run it:
- here and in CI: `make e2e` builds the tools (scripts/e2e-tools.sh, cached outside the clone)
  and starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the training
  operator, Trainer and JobSet, and kwok on loopback (cluster/control_plane.py, the
  one-machine cluster's own, with kwok's fake nodes);
- against your own CLI and cluster: `PD_E2E_PULUMI=$(command -v pulumi)
  PD_E2E_KUBECONFIG=~/.kube/config PD_E2E_IMAGE_REF=<trainer image@sha256:...> make e2e` (e.g.
  kind from scripts/kind-up.sh, with the training operator); `PD_E2E_STORAGE=hostpath` adds the
  suite's hostPath volumes for a one-node cluster without a ReadWriteMany provisioner. There the
  pods really run the trainer, so the job finishes by itself instead of by the suite's hand.

Every user command runs as a user types it, in a copy of the checkout (the Makefile, scripts/,
tools/, the stack files; `.venv` and `policy/venv` are the repository's, linked): `make
preview|up|destroy|status|checkpoint STACK=...` with make variables `make help` lists
(`PULUMI_ARGS`, `EVENT_LOG`, ...), and `pulumi ...` where the README has users type it, in an
environment built from scratch: HOME, PATH and only what README.md's "Environment variables"
lists (tests/e2e/user_environment.py refuses anything else). The Kubernetes and Docker providers
are the binaries scripts/e2e-tools.sh built, installed with `pulumi plugin install --file`
(nothing is downloaded at run time).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.automation import EngineEvent

from cluster.control_plane import ControlPlane, build_tools, create_hostpath_storage
from cluster.real_node import RealNode
from cluster.service import provider_versions
from settings.stack import PROJECT, StackSettings, load_stack_file
from tests.conftest import REPO_ROOT
from tests.containers import remove_images_for
from tests.e2e.user_environment import SYSTEM_PATH, user_environment
from tests.support.timings import ModuleTimings

PASSPHRASE = "e2e-passphrase-not-a-secret"
# Unique enough that finding it anywhere in outputs or state means it leaked.
REGISTRY_PASSWORD = "e2e-registry-pa55word-7f3c9a1d"
PASSWORD_KEY = f"{PROJECT}:registryPassword"
E2E_DIR = Path(__file__).parent
# The stack's policy-pack config, as policy/config/<stack>.json is for dev and prod.
POLICY_CONFIG = E2E_DIR / "policy-config.json"
# What of a user's checkout the make targets read (the rest is tests and docs); requirements and
# the Makefile keep their times, so make's install stamps in the linked .venv hold for the copy.
PROJECT_FILES = (
    "Makefile",
    "Pulumi.yaml",
    # `make cluster` makes its LocalQueue in the local stack's namespace.
    "Pulumi.local.yaml",
    "__main__.py",
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-docs.txt",
    "settings",
    "builders",
    "readers",
    "components",
    "trainer",
    "machine",
    "cluster",
    "tools",
    "scripts",
)
CLI_TIMEOUT_S = 1800
# The line GNU make ends with when a recipe fails: the command's own exit status is N.
MAKE_ERROR = re.compile(r"^make: \*\*\* \[[^\]]*\] Error (\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Toolchain:
    """The CLI, and the provider binaries to install (none: the CLI acquires its own)."""

    pulumi: Path
    bin_dir: Path | None

    def provider(self, package: str) -> Path | None:
        """scripts/e2e-tools.sh keeps the providers beside bin/, off PATH."""
        if self.bin_dir is None:
            return None
        return self.bin_dir.parent / "providers" / f"pulumi-resource-{package}"


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    plane: ControlPlane | None

    @property
    def fake_nodes(self) -> bool:
        return self.plane is not None

    def api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    pulumi = os.environ.get("PD_E2E_PULUMI")
    if pulumi:
        return Toolchain(Path(pulumi), None)
    bin_dir = build_tools()
    return Toolchain(bin_dir / "pulumi", bin_dir)


@pytest.fixture(scope="session")
def cluster(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    kubeconfig = os.environ.get("PD_E2E_KUBECONFIG")
    if kubeconfig:
        cluster = Cluster(Path(kubeconfig), None)
        if os.environ.get("PD_E2E_STORAGE") == "hostpath":
            create_hostpath_storage(cluster.api(), Path("/var/local/pd-e2e"), on_this_machine=False)
        yield cluster
        return
    assert toolchain.bin_dir is not None
    with ControlPlane(toolchain.bin_dir, tmp_path_factory.mktemp("control-plane")) as plane:
        yield Cluster(plane.kubeconfig, plane)


@pytest.fixture(scope="module")
def kueue(cluster: Cluster) -> ControlPlane:
    """The suite's control plane with Kueue running (started by its first module that queues)."""
    plane = cluster.plane
    if plane is None:
        pytest.skip("an external cluster: Kueue is started on the suite's own control plane")
    if not plane.private_mounts:
        pytest.skip("Kueue runs on the suite's control plane only as root")
    plane.add_kueue()
    return plane


# Who the real node's registry lets push and pull.
REAL_NODE_USER = "e2e-robot"


@pytest.fixture(scope="session")
def real_node_registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the real node's registry keeps its images, for every module that starts a node: the
    base image's 4 GB of layers are pushed once, and a later module's push finds them there."""
    return tmp_path_factory.mktemp("real-node-registry")


def started_real_node(cluster: Cluster, registry_dir: Path) -> Iterator[RealNode]:
    """A module's real node (its fixture yields from this), stopped when the module ends."""
    if cluster.plane is None:
        pytest.skip("an external cluster: the real node belongs to the suite's control plane")
    with cluster.plane.real_node(
        registry_user=REAL_NODE_USER,
        registry_password=REGISTRY_PASSWORD,
        registry_dir=registry_dir,
    ) as started:
        try:
            yield started
        finally:
            remove_images_for(started.registry.address)


MODULE_TIMINGS = ModuleTimings()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each module's seconds for .ci/run's timing table (tests/support/timings.py)."""
    started = time.monotonic()
    yield
    MODULE_TIMINGS.add(item.path.name, time.monotonic() - started)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        MODULE_TIMINGS.fail(Path(report.fspath).name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    MODULE_TIMINGS.write("e2e module")


# With two workers (`make e2e E2E_WORKERS=2`), the modules that need this machine to themselves
# run one after another on one worker: those that start a real node (kubelet and containerd) or a
# whole one-machine cluster, and those that build with podman, whose store every build shares
# (test_image_build asserts that a build leaves nothing in it), unless they hold the store's
# shared lock (tests/containers.py podman_store), as test_faults_registry does: test_image_build
# holds it alone.
EXCLUSIVE_GROUP = "exclusive"
EXCLUSIVE_MODULES = (
    "test_cluster.py",
    "test_own_code.py",
    "test_image_build.py",
    "test_real_node.py",
    "test_network_policy_agent.py",
)


def module_group(module: str, variant: str | None = None) -> str:
    """The xdist group a module's tests run in, each worker on a control plane of its own:
    every module is a group, or one per job API where the module runs once for each (its
    `variant`), but for the exclusive ones, which make one."""
    if module in EXCLUSIVE_MODULES:
        return EXCLUSIVE_GROUP
    return module if variant is None else f"{module}[{variant}]"


def job_api_variant(item: pytest.Item) -> str | None:
    """The job API a test runs against where its module runs once for each (the module-scoped
    fixture `job_api_name`, tests/e2e/test_stack_lifecycle.py)."""
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("job_api_name")


def for_its_job_api(item: pytest.Item) -> bool:
    """False for a test marked `job_api(name, ...)` in the half of its module that runs against
    another job API: a test only one API has."""
    marker = item.get_closest_marker("job_api")
    variant = job_api_variant(item)
    return marker is None or variant is None or variant in marker.args


def module_order(module: str, *, parallel: bool) -> tuple[int, int, int, str]:
    """The fault modules last in every worker: they kill and restart their plane's API server,
    operator or registry, after which controllers' caches (Trainer's admission webhook reads
    TrainingRuntimes from its cache) may lag; every other module runs on a plane as it was
    started. With workers (`parallel`), the exclusive group first: the longest, it starts while
    the other worker goes through the rest, in EXCLUSIVE_MODULES' order (test_image_build, which
    has the podman store to itself, after test_own_code: by then the `make image-test` that
    .ci/run runs beside the suite is done with the store, and the other worker is not yet at
    test_faults_registry, which shares it)."""
    exclusive = module in EXCLUSIVE_MODULES
    first = 0 if not parallel or exclusive else 1
    within = EXCLUSIVE_MODULES.index(module) if parallel and exclusive else 0
    return (first, 1 if module.startswith("test_faults") else 0, within, module)


# First: xdist's own hook (registered after this conftest, so called before it) turns the groups
# into node ids, and would find none.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    other_api = [item for item in items if not for_its_job_api(item)]
    if other_api:
        config.hook.pytest_deselected(items=other_api)
        items[:] = [item for item in items if for_its_job_api(item)]
    parallel = "PYTEST_XDIST_WORKER" in os.environ
    # A stable sort: within a module, the order pytest gave (each job API's tests together).
    items.sort(key=lambda item: module_order(item.path.name, parallel=parallel))
    for item in items:
        group = module_group(item.path.name, job_api_variant(item))
        item.add_marker(pytest.mark.xdist_group(group))


def recipe_status(returncode: int, output: str) -> int:
    """The exit status of the command a `make` target ran (make itself exits 2 for any)."""
    if returncode == 0:
        return 0
    failed = MAKE_ERROR.findall(output)
    return int(failed[-1]) if failed else returncode


def command_status(done: subprocess.CompletedProcess[str]) -> int:
    return recipe_status(done.returncode, done.stdout + done.stderr)


def own_lines(text: str) -> list[str]:
    """A make target's stderr without make's own line about the failed recipe (`make: ***`)."""
    return [line for line in text.splitlines() if not line.startswith("make: ***")]


def make_args(flags: tuple[str, ...]) -> str:
    """Flags as a make variable's value on the command line: quoted for the recipe's shell, each
    `$` doubled for make (a Pulumi URN holds `$`), as a user types them."""
    return " ".join(shlex.quote(flag).replace("$", "$$") for flag in flags)


@dataclass(frozen=True)
class Result:
    """One CLI command: its exit code, everything it printed, and its engine events."""

    returncode: int
    output: str
    events: list[EngineEvent] = field(default_factory=list)

    @property
    def status(self) -> int:
        """The exit status of the command `make` ran (its own `returncode` is 2 for any)."""
        return recipe_status(self.returncode, self.output)

    def summary(self) -> dict[str, int]:
        """Resource operations the engine counted ({"create": 10, "same": 2, ...})."""
        for event in reversed(self.events):
            if event.summary_event is not None:
                changes = event.summary_event.resource_changes.items()
                return {str(getattr(op, "value", op)): n for op, n in changes}
        raise AssertionError(f"no summary event:\n{self.output}")

    def steps(self, resource_type: str) -> list[str]:
        """The engine's operations on resources of one type, in the order it began them."""
        return [
            event.resource_pre_event.metadata.op.value
            for event in self.events
            if event.resource_pre_event is not None
            and event.resource_pre_event.metadata.type == resource_type
        ]

    def registered(self) -> list[str]:
        """The URNs the engine began an operation on."""
        return [
            event.resource_pre_event.metadata.urn
            for event in self.events
            if event.resource_pre_event is not None
        ]


def read_events(path: Path) -> list[EngineEvent]:
    """The engine events of one command. A CLI that dies mid-write (a fault scenario kills it)
    leaves its last line cut short: that line is not an event."""
    lines = [line for line in path.read_text().splitlines() if line]
    events = []
    for number, line in enumerate(lines, start=1):
        try:
            events.append(EngineEvent.from_json(json.loads(line)))
        except json.JSONDecodeError:
            if number != len(lines):
                raise
    return events


@dataclass
class Project:
    """A copy of the checkout as a user has it after `make venv policy-venv`, the variables a user
    sets for it (README.md's "Environment variables"), and the PATH with the CLI on it."""

    work_dir: Path
    variables: dict[str, str]
    path: str
    toolchain: Toolchain

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """What a user command runs with: built from scratch, documented names only."""
        return user_environment(
            {**self.variables, **(extra or {})}, home=os.environ["HOME"], path=self.path
        )

    def run(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`argv` in the project; `stdin`: what the user types at its prompt."""
        done = subprocess.run(
            argv,
            cwd=self.work_dir,
            env=self.environment(env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        if check:
            assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
        return done

    def popen(
        self, argv: list[str], *, env: Mapping[str, str] | None = None, **options: Any
    ) -> subprocess.Popen[Any]:
        """A user command in the background (a second terminal)."""
        return subprocess.Popen(argv, cwd=self.work_dir, env=self.environment(env), **options)

    def make_argv(self, target: str, **variables: str) -> list[str]:
        """`make TARGET NAME=value...` as typed in the checkout (empty values left out)."""
        assigned = [f"{name}={value}" for name, value in variables.items() if value]
        return ["make", "--no-print-directory", target, *assigned]

    def make(
        self,
        target: str,
        *,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
        **variables: str,
    ) -> subprocess.CompletedProcess[str]:
        return self.run(self.make_argv(target, **variables), env=env, check=check, stdin=stdin)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The CLI itself, what a user types in the project directory."""
        return self.run(["pulumi", *args], check=check)

    def stack(self, name: str, *, env: Mapping[str, str] | None = None) -> Stack:
        """Stack `name` from tests/e2e/Pulumi.<name>.yaml, with its policy config and secret."""
        shutil.copy(E2E_DIR / f"Pulumi.{name}.yaml", self.work_dir / f"Pulumi.{name}.yaml")
        shutil.copy(POLICY_CONFIG, self.work_dir / "policy" / "config" / f"{name}.json")
        stack = Stack(self, name, dict(env or {}))
        stack.cli("stack", "select", "--create")
        stack.cli("config", "set", "--secret", PASSWORD_KEY, REGISTRY_PASSWORD)
        image_ref = os.environ.get("PD_E2E_IMAGE_REF")
        if image_ref and not stack.settings().image.build:
            stack.config_set("image.ref", image_ref)
        return stack


@dataclass
class Stack:
    """One stack of the project, driven through `make ACTION STACK=...` as a user does."""

    project: Project
    name: str
    env: dict[str, str]

    def make_argv(self, action: str, *flags: str, events_file: Path | None = None) -> list[str]:
        """`make ACTION STACK=name [EVENT_LOG=FILE] [PULUMI_ARGS=FLAGS]`."""
        return self.project.make_argv(
            action,
            STACK=self.name,
            EVENT_LOG=str(events_file or ""),
            PULUMI_ARGS=make_args(flags),
        )

    def make(self, action: str, *flags: str, check: bool = True) -> Result:
        """`make ACTION STACK=...` with the engine's events written to a file of the suite's."""
        events_file = self.project.work_dir / f".events-{self.name}-{time.monotonic_ns()}.jsonl"
        done = self.project.run(
            self.make_argv(action, *flags, events_file=events_file), env=self.env, check=False
        )
        output = done.stdout + done.stderr
        events = []
        if events_file.exists():
            events = read_events(events_file)
            events_file.unlink()
        result = Result(done.returncode, output, events)
        if check:
            assert done.returncode == 0, f"make {action} STACK={self.name}:\n{output}"
        return result

    def preview(self, *flags: str, check: bool = True) -> Result:
        return self.make("preview", *flags, check=check)

    def up(self, *flags: str, check: bool = True) -> Result:
        return self.make("up", *flags, check=check)

    def destroy(self, *flags: str, check: bool = True) -> Result:
        return self.make("destroy", *flags, check=check)

    def status(self, *flags: str) -> subprocess.CompletedProcess[str]:
        """`make status STACK=... STATUS_ARGS=...`."""
        return self.project.make(
            "status", env=self.env, check=False, STACK=self.name, STATUS_ARGS=make_args(flags)
        )

    def checkpoint(self, out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
        """`make checkpoint STACK=... OUT=... RETRIEVE_ARGS=...`."""
        return self.project.make(
            "checkpoint",
            env=self.env,
            check=False,
            STACK=self.name,
            OUT=str(out),
            RETRIEVE_ARGS=make_args(flags),
        )

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.project.run(["pulumi", *args, "--stack", self.name], env=self.env, check=check)

    def config_set(self, key: str, value: str, *, secret: bool = False) -> None:
        """`make config STACK=... CONFIG_ARGS='set --path pytorch-distributed:KEY VALUE'`, as the
        README shows; a secret's value on stdin, as a user types it at the prompt."""
        path = f"{PROJECT}:{key}"
        words = ("set", "--secret", "--path", path) if secret else ("set", "--path", path, value)
        done = self.project.make(
            "config",
            env=self.env,
            check=False,
            stdin=value if secret else None,
            STACK=self.name,
            CONFIG_ARGS=make_args(words),
        )
        assert done.returncode == 0, f"make config STACK={self.name}:\n{done.stdout}{done.stderr}"

    def config(self) -> dict[str, Any]:
        path = self.project.work_dir / f"Pulumi.{self.name}.yaml"
        return yaml.safe_load(path.read_text())["config"]

    def settings(self) -> StackSettings:
        """The stack file as the program reads it (secrets redacted)."""
        return load_stack_file(self.name, self.project.work_dir)

    def outputs(self) -> dict[str, Any]:
        return json.loads(self.cli("stack", "output", "--json").stdout)


def copy_checkout(work_dir: Path) -> None:
    """The project's files a user's checkout has, with their times (make's stamps compare
    them), and the repository's virtual environments linked in, as `make venv policy-venv`
    left them."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in PROJECT_FILES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, work_dir / name, ignore=ignore)
        else:
            shutil.copy2(source, work_dir / name)
    shutil.copytree(
        REPO_ROOT / "policy",
        work_dir / "policy",
        ignore=shutil.ignore_patterns("venv", "__pycache__"),
    )
    (work_dir / "policy" / "venv").symlink_to(REPO_ROOT / "policy" / "venv")
    (work_dir / ".venv").symlink_to(REPO_ROOT / ".venv")


# What a program that installs the package needs of the checkout besides the project's files.
PACKAGE_FILES = ("pyproject.toml", "examples", "provider")


@pytest.fixture(scope="module")
def package_checkout(project: Project) -> Path:
    """The project's copy with the package's files added (not the repository's own: the CLI
    makes provider/.venv where it runs the plugin, and the checkout gets none)."""
    for name in PACKAGE_FILES:
        source = REPO_ROOT / name
        target = project.work_dir / name
        if source.is_dir():
            shutil.copytree(
                source,
                target,
                ignore=shutil.ignore_patterns(".venv", "__pycache__"),
                dirs_exist_ok=True,
            )
        else:
            shutil.copy2(source, target)
    return project.work_dir


@pytest.fixture(scope="session")
def project(
    toolchain: Toolchain, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Project:
    """The checkout copied the way a user has it, with the variables a user sets."""
    # What `make e2e` made already: the stamps the copy's make then finds.
    subprocess.run(
        ["make", "--no-print-directory", "venv", "policy-venv"], cwd=REPO_ROOT, check=True
    )
    root = tmp_path_factory.mktemp("pulumi")
    work_dir = root / "project"
    work_dir.mkdir()
    copy_checkout(work_dir)
    (root / "state").mkdir()
    # The CLI and its language host (pulumi-language-python and its -exec shim) on PATH, as the
    # README has users add the tools' bin directory (or install the CLI).
    cli_dir = toolchain.bin_dir or toolchain.pulumi.parent
    variables = {
        "PULUMI_HOME": str(root / "home"),
        "PULUMI_BACKEND_URL": f"file://{root / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_SKIP_CONFIRMATIONS": "true",
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    if toolchain.bin_dir is not None:
        # Nothing is downloaded at run time: the providers come from the files built here.
        variables["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] = "true"
    project = Project(work_dir, variables, f"{cli_dir}{os.pathsep}{SYSTEM_PATH}", toolchain)
    for package, version in provider_versions().items():
        binary = toolchain.provider(package)
        if binary is not None:
            project.cli("plugin", "install", "resource", package, version, "--file", str(binary))
    return project
