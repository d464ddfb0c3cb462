"""The real-engine suite imports cleanly: `make test` runs without a control plane, so a module
of tests/e2e that no longer imports (a renamed constant) would otherwise surface only in
`make e2e`, after its long tool build."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def collected(path: str) -> subprocess.CompletedProcess[str]:
    """`pytest --collect-only -q` of `path`: the test ids, one a line, and a summary."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", path],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_every_e2e_module_is_collected() -> None:
    done = collected("tests/e2e")
    assert " error" not in done.stdout.splitlines()[-1], done.stdout


def test_every_stack_on_the_real_node_names_its_storage_class() -> None:
    """A stack whose claim names a class the node does not make waits out the claim's timeout
    (minutes) in `make e2e`: the class has one home, cluster/real_node.py."""
    import yaml

    from cluster.real_node import STORAGE_CLASS
    from settings.stack import PROJECT

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


def test_the_lifecycle_runs_once_per_job_api_each_half_a_group_of_its_own() -> None:
    """tests/e2e/test_stack_lifecycle.py runs its life once per job API: a test both have in
    both halves, a test marked for one API in its half only, each half's tests together and in
    file order, and under xdist each half in a group of its own."""
    from tests.e2e.conftest import module_group

    done = collected("tests/e2e/test_stack_lifecycle.py")
    ids = [line.split("::")[1] for line in done.stdout.splitlines() if "::" in line]
    halves = [test.rsplit("[", 1)[1].rstrip("]") for test in ids]
    assert halves == sorted(halves), "the halves' tests are interleaved"
    by_half: dict[str, list[str]] = {}
    for test, half in zip(ids, halves, strict=True):
        by_half.setdefault(half, []).append(test.rsplit("[", 1)[0])
    assert sorted(by_half) == ["pytorchjob", "trainjob"]
    pytorchjob, trainjob = by_half["pytorchjob"], by_half["trainjob"]
    for both in (
        "test_policy_pack_blocks_a_violating_change",
        "test_preview_right_after_up_expects_no_changes",
        "test_destroy_keeps_the_retained_claim_and_up_reuses_it_with_its_data",
    ):
        assert both in pytorchjob and both in trainjob
    only_trainjob = "test_changing_the_restart_policy_is_a_new_runtime_and_a_new_trainjob"
    assert only_trainjob in trainjob and only_trainjob not in pytorchjob
    only_pytorchjob = "test_metadata_change_of_a_finished_job_updates_it_promptly"
    assert only_pytorchjob in pytorchjob and only_pytorchjob not in trainjob
    # File order in each half: up before the replacement, destroy last.
    for half in (pytorchjob, trainjob):
        assert half.index("test_up_creates_secret_claim_and_job_as_the_builders_describe") < (
            half.index("test_changing_total_epochs_replaces_the_job_deleting_the_old_one_first")
        )
        assert half[-1] == "test_destroy_removes_the_claim_when_retain_on_destroy_is_false"
    groups = {module_group("test_stack_lifecycle.py", half) for half in by_half}
    assert len(groups) == 2
