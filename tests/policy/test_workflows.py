"""The review workflows keep their guard rails: every stack previewed with the policy pack and its
config, prod behind the protected environment, one update per stack at a time, minimal token
permissions, and shell steps that shellcheck accepts (the schema check in `make test` does not
look inside `run:` blocks)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.stacks import on_cluster
from tests.conftest import REPO_ROOT

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
SHELLCHECK = REPO_ROOT / ".venv" / "bin" / "shellcheck"
PULUMI_ACTION = "pulumi/actions@v6"


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())


# The one-machine cluster's stacks run where `make cluster` runs, never on a team's cluster: a
# pull request has nothing to preview them against (the real-engine suite brings up that cluster).


def stacks() -> list[str]:
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in stack_files())


def team_stacks() -> list[str]:
    return [stack for stack in stacks() if not on_cluster(stack)]


def stack_files() -> list[Path]:
    return [p for p in REPO_ROOT.glob("Pulumi.*.yaml") if p.name != "Pulumi.yaml"]


def pulumi_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Steps that run a Pulumi command on a stack (not those that only install the CLI)."""
    return [
        s for s in job["steps"] if s.get("uses") == PULUMI_ACTION and "command" in s.get("with", {})
    ]


def test_every_stack_has_a_policy_config() -> None:
    assert stacks(), "no Pulumi.<stack>.yaml found"
    for stack in stacks():
        assert (REPO_ROOT / "policy" / "config" / f"{stack}.json").is_file(), stack


def test_pull_requests_preview_every_stack_with_the_policy_pack() -> None:
    workflow = load("pull-request.yml")
    preview = workflow["jobs"]["preview"]
    assert preview["needs"] == "test"
    assert sorted(preview["strategy"]["matrix"]["stack"]) == team_stacks()
    [step] = pulumi_steps(preview)
    assert step["with"]["command"] == "preview"
    assert step["with"]["diff"] is True
    assert step["with"]["comment-on-pr"] is True
    assert step["with"]["policyPacks"] == "policy"
    assert step["with"]["policyPackConfigs"] == "policy/config/${{ matrix.stack }}.json"


def test_only_the_commenting_job_may_write_to_pull_requests() -> None:
    for name in ("pull-request.yml", "deploy.yml"):
        workflow = load(name)
        assert workflow["permissions"] == {"contents": "read"}, name
        for job_name, job in workflow["jobs"].items():
            writes = {k for k, v in job.get("permissions", {}).items() if v == "write"}
            commenting = any(s["with"].get("comment-on-pr") for s in pulumi_steps(job))
            assert writes == ({"pull-requests"} if commenting else set()), (name, job_name)


def test_merges_deploy_dev_then_prod_behind_the_protected_environment() -> None:
    jobs = load("deploy.yml")["jobs"]
    assert jobs["dev"]["needs"] == "test"
    assert jobs["prod"]["needs"] == "dev"
    assert jobs["prod"]["environment"] == "production"
    for stack in ("dev", "prod"):
        # The action's `up` skips its preview; a preview with the pack gates it, so stack-level
        # policies stop a violating update before any step runs.
        gate, up = pulumi_steps(jobs[stack])
        assert (gate["with"]["command"], up["with"]["command"]) == ("preview", "up")
        for step in (gate, up):
            assert step["with"]["stack-name"] == stack
            assert step["with"]["policyPacks"] == "policy"
            assert step["with"]["policyPackConfigs"] == f"policy/config/{stack}.json"
        assert jobs[stack]["concurrency"] == {
            "group": f"pulumi-up-{stack}",
            "cancel-in-progress": False,
        }


def test_workflows_use_the_cli_version_the_sdk_is_pinned_to() -> None:
    pins = dict(
        line.split("==")
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    for name in ("pull-request.yml", "deploy.yml"):
        for job in load(name)["jobs"].values():
            for step in job["steps"]:
                if step.get("uses") == PULUMI_ACTION:
                    assert step["with"]["pulumi-version"] == pins["pulumi"], name


def test_state_backend_and_passphrase_come_from_secrets() -> None:
    for name in ("pull-request.yml", "deploy.yml"):
        for job in load(name)["jobs"].values():
            for step in pulumi_steps(job):
                assert step["with"]["cloud-url"] == "${{ secrets.PULUMI_BACKEND_URL }}"
                assert step["env"]["PULUMI_CONFIG_PASSPHRASE"] == (
                    "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
                )


def run_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_name, job in yaml.safe_load(path.read_text())["jobs"].items():
            for index, step in enumerate(job["steps"]):
                if "run" in step:
                    blocks.append((f"{path.name}:{job_name}:{index}", step["run"]))
    return blocks


@pytest.mark.parametrize(("where", "script"), run_blocks(), ids=[w for w, _ in run_blocks()])
def test_run_steps_pass_shellcheck(where: str, script: str, tmp_path: Path) -> None:
    # GitHub substitutes ${{ ... }} before bash sees the script; stand in a plain word.
    body = re.sub(r"\$\{\{.*?\}\}", "EXPRESSION", script)
    path = tmp_path / "step.sh"
    path.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + body)
    result = subprocess.run(
        [str(SHELLCHECK), str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"{where}:\n{result.stdout}{result.stderr}"
