"""Fixtures of the real-engine suite: the Pulumi CLI with its Python language host and providers, a
control plane, and the project directory the CLI runs in.

Two ways to run it:
- here and in CI: `make e2e` builds the tools (scripts/e2e-tools.sh, cached outside the clone)
  and starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the training operator
  and kwok on loopback (tests/support/control_plane.py);
- against your own CLI and cluster: `PD_E2E_PULUMI=$(command -v pulumi)
  PD_E2E_KUBECONFIG=~/.kube/config PD_E2E_IMAGE_REF=<trainer image@sha256:...> make e2e` (e.g.
  kind from scripts/kind-up.sh, with the training operator); `PD_E2E_STORAGE=hostpath` adds the
  suite's hostPath volumes for a one-node cluster without a ReadWriteMany provisioner. There the
  pods really run the trainer, so the job finishes by itself instead of by the suite's hand.

Everything runs the way a user runs `make preview/up/destroy`: the plain `pulumi` CLI in a copy of
the project directory, whose virtualenv `pulumi install` creates from requirements.txt;
`scripts/pulumi-stack.sh` runs preview, up and destroy (with the policy pack, `policy/venv` made
by `make policy-venv`); the CLI's Python language host runs `__main__.py` from that virtualenv;
the Kubernetes and Docker providers are the binaries scripts/e2e-tools.sh built, installed with
`pulumi plugin install --file` (nothing is downloaded at run time).
"""

from __future__ import annotations

import json
import os
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

from components.settings import PROJECT, StackSettings, load_stack_file
from tests.conftest import REPO_ROOT
from tests.support.control_plane import ControlPlane, build_tools, create_hostpath_storage
from tests.support.timings import ModuleTimings

PASSPHRASE = "e2e-passphrase-not-a-secret"
# Unique enough that finding it anywhere in outputs or state means it leaked.
REGISTRY_PASSWORD = "e2e-registry-pa55word-7f3c9a1d"
PASSWORD_KEY = f"{PROJECT}:registryPassword"
E2E_DIR = Path(__file__).parent
# The stack's policy-pack config, as policy/config/<stack>.json is for dev and prod.
POLICY_CONFIG = E2E_DIR / "policy-config.json"
# What of the project a user's checkout holds that `pulumi up` reads (the rest is tests, docs).
PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "requirements.txt", "components", "trainer")
PROVIDERS = {"kubernetes": "4.25.0", "docker": "4.11.2"}
CLI_TIMEOUT_S = 1800


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fault modules last: they kill and restart the session plane's API server and
    operator, after which controllers' caches (Trainer's admission webhook reads TrainingRuntimes
    from its cache) may lag; every other module runs on the plane as it was started."""
    items.sort(key=lambda item: Path(str(item.fspath)).name.startswith("test_faults"))


@dataclass(frozen=True)
class Result:
    """One CLI command: its exit code, everything it printed, and its engine events."""

    returncode: int
    output: str
    events: list[EngineEvent] = field(default_factory=list)

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
    """A copy of the project directory, with the stack's virtualenv, the policy pack, the CLI's
    environment and a file backend, as a user's checkout is after `make venv policy-venv`."""

    work_dir: Path
    env: dict[str, str]
    toolchain: Toolchain

    def run(
        self, argv: list[str], *, env: Mapping[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv,
            cwd=self.work_dir,
            env={**os.environ, **self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        if check:
            assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
        return done

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The CLI itself, what a user types in the project directory."""
        return self.run([str(self.toolchain.pulumi), *args, "--non-interactive"], check=check)

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
    """One stack of the project, driven through scripts/pulumi-stack.sh as `make up` does."""

    project: Project
    name: str
    env: dict[str, str]

    def make(self, action: str, *flags: str, check: bool = True) -> Result:
        """`scripts/pulumi-stack.sh ACTION STACK FLAGS`: what `make ACTION STACK=...` runs."""
        events_file = self.project.work_dir / f".events-{self.name}-{time.monotonic_ns()}.jsonl"
        done = self.project.run(
            [
                str(self.project.work_dir / "scripts" / "pulumi-stack.sh"),
                action,
                self.name,
                "--non-interactive",
                "--event-log",
                str(events_file),
                *flags,
            ],
            env=self.env,
            check=False,
        )
        output = done.stdout + done.stderr
        events = []
        if events_file.exists():
            events = read_events(events_file)
            events_file.unlink()
        result = Result(done.returncode, output, events)
        if check:
            assert done.returncode == 0, f"pulumi-stack.sh {action} {self.name}:\n{output}"
        return result

    def preview(self, *flags: str, check: bool = True) -> Result:
        return self.make("preview", *flags, check=check)

    def up(self, *flags: str, check: bool = True) -> Result:
        return self.make("up", *flags, check=check)

    def destroy(self, *flags: str, check: bool = True) -> Result:
        return self.make("destroy", *flags, check=check)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.project.run(
            [str(self.project.toolchain.pulumi), *args, "--stack", self.name, "--non-interactive"],
            env=self.env,
            check=check,
        )

    def config_set(self, key: str, value: str, *, secret: bool = False) -> None:
        """`pulumi config set --path pytorch-distributed:KEY VALUE`, as the README shows."""
        self.cli(
            "config", "set", "--path", *(["--secret"] if secret else []), f"{PROJECT}:{key}", value
        )

    def config(self) -> dict[str, Any]:
        path = self.project.work_dir / f"Pulumi.{self.name}.yaml"
        return yaml.safe_load(path.read_text())["config"]

    def settings(self) -> StackSettings:
        """The stack file as the program reads it (secrets redacted)."""
        return load_stack_file(self.name, self.project.work_dir)

    def outputs(self) -> dict[str, Any]:
        return json.loads(self.cli("stack", "output", "--json").stdout)


@pytest.fixture(scope="session")
def project(
    toolchain: Toolchain, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Project:
    """The project copied the way a user has it, its virtualenv from `pulumi install`."""
    root = tmp_path_factory.mktemp("pulumi")
    work_dir = root / "project"
    work_dir.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in PROJECT_FILES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, work_dir / name, ignore=ignore)
        else:
            shutil.copy(source, work_dir / name)
    (work_dir / "scripts").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "pulumi-stack.sh", work_dir / "scripts")
    # The module the script hands each command to (stale locks, pending operations, failures).
    (work_dir / "tools").mkdir()
    for name in ("__init__.py", "pulumi_run.py"):
        shutil.copy(REPO_ROOT / "tools" / name, work_dir / "tools")
    # The pack with the virtualenv `make policy-venv` creates; its rules and configs are copied.
    subprocess.run(["make", "--no-print-directory", "policy-venv"], cwd=REPO_ROOT, check=True)
    shutil.copytree(
        REPO_ROOT / "policy",
        work_dir / "policy",
        ignore=shutil.ignore_patterns("venv", "__pycache__"),
    )
    (work_dir / "policy" / "venv").symlink_to(REPO_ROOT / "policy" / "venv")
    (root / "state").mkdir()
    path = os.environ["PATH"]
    if toolchain.bin_dir is not None:
        # The language host (pulumi-language-python and its -exec shim) is found on PATH.
        path = f"{toolchain.bin_dir}{os.pathsep}{path}"
    else:
        path = f"{toolchain.pulumi.parent}{os.pathsep}{path}"
    env = {
        "PULUMI_HOME": str(root / "home"),
        "PULUMI_BACKEND_URL": f"file://{root / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_SKIP_CONFIRMATIONS": "true",
        # Enables `--event-log` (as the Automation API does): the engine's events, one JSON line
        # each, are what the suite reads operations and summaries from.
        "PULUMI_DEBUG_COMMANDS": "true",
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": path,
    }
    if toolchain.bin_dir is not None:
        # Nothing is downloaded at run time: the providers come from the files built here.
        env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] = "true"
    project = Project(work_dir, env, toolchain)
    for package, version in PROVIDERS.items():
        binary = toolchain.provider(package)
        if binary is not None:
            project.cli("plugin", "install", "resource", package, version, "--file", str(binary))
    # What a user's first `pulumi up` does: the stack's virtualenv from requirements.txt.
    project.cli("install")
    return project
