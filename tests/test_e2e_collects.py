"""The real-engine suite imports cleanly: `make test` runs without a control plane, so a module
of tests/e2e that no longer imports (a renamed constant) would otherwise surface only in
`make e2e`, after its long tool build."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_every_e2e_module_is_collected() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/e2e",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " error" not in done.stdout.splitlines()[-1], done.stdout


def test_every_stack_on_the_real_node_names_its_storage_class() -> None:
    """A stack whose claim names a class the node does not make waits out the claim's timeout
    (minutes) in `make e2e`: the class has one home, tools/cluster/real_node.py."""
    import yaml

    from components.settings import PROJECT
    from tools.cluster.real_node import STORAGE_CLASS

    stacks = [
        REPO_ROOT / "Pulumi.local.yaml",
        *sorted((REPO_ROOT / "tests/e2e").glob("Pulumi.*.yaml")),
    ]
    named = {
        path.name: checkpoints["storageClass"]
        for path in stacks
        if "storageClass"
        in (
            checkpoints := yaml.safe_load(path.read_text())["config"].get(
                f"{PROJECT}:checkpoints", {}
            )
        )
    }
    assert named, "no stack runs on the real node"
    assert named == dict.fromkeys(named, STORAGE_CLASS)


def test_every_module_that_starts_a_node_or_builds_runs_in_the_exclusive_group() -> None:
    """`make e2e E2E_WORKERS=2`: a module that starts a real node (or a whole cluster), or
    builds with podman, outside the group would run beside another's node or build; a module
    that builds holding the store's shared lock may (test_image_build holds it alone)."""
    from tests.e2e.conftest import EXCLUSIVE_GROUP, module_group

    markers = ("started_real_node(", 'make("cluster"', "DOCKER_HOST", "build_base_image")
    shared = "podman_store(alone=False)"
    texts = {path.name: path.read_text() for path in (REPO_ROOT / "tests/e2e").glob("test_*.py")}
    exclusive = {
        name
        for name, text in texts.items()
        if any(marker in text for marker in markers) and shared not in text
    }
    assert {"test_real_node.py", "test_image_build.py"} <= exclusive
    assert "podman_store(alone=True)" in texts["test_image_build.py"]
    assert {name for name, text in texts.items() if shared in text} == {"test_faults_registry.py"}
    assert {module: module_group(module) for module in exclusive} == dict.fromkeys(
        exclusive, EXCLUSIVE_GROUP
    )


def test_the_fault_modules_run_last_in_each_worker_and_the_exclusive_group_first() -> None:
    from tests.e2e.conftest import EXCLUSIVE_MODULES, module_order

    modules = sorted(path.name for path in (REPO_ROOT / "tests/e2e").glob("test_*.py"))
    serial = sorted(modules, key=lambda module: module_order(module, parallel=False))
    faults = [module for module in modules if module.startswith("test_faults")]
    assert serial == [m for m in modules if m not in faults] + faults
    ordered = sorted(modules, key=lambda module: module_order(module, parallel=True))
    exclusive = [module for module in ordered if module in EXCLUSIVE_MODULES]
    others = [module for module in ordered if module not in EXCLUSIVE_MODULES]
    assert ordered == exclusive + others
    for group in (exclusive, others):
        in_group = [module for module in group if module.startswith("test_faults")]
        assert group[len(group) - len(in_group) :] == in_group
    assert {"test_faults.py", "test_faults_registry.py"} <= set(others)
    # The module that has the podman store to itself comes after the first real-node module, when
    # the `make image-test` beside the suite (.ci/run) is done with the store, and before the
    # last, while the other worker is still short of test_faults_registry, which shares it.
    build = exclusive.index("test_image_build.py")
    assert exclusive.index("test_own_code.py") < build < exclusive.index("test_real_node.py")
