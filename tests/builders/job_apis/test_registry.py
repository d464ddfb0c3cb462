"""A job API is one module per layer: registering a third one (a made-up `EchoJob`, defined here
as its module would define it) is all the watch, `make status`'s words and the local runner with
both backends need to handle it; none of them names an API."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pytest

import builders.job_apis as job_apis
from builders.job_apis import (
    JobApi,
    PodIdentity,
    PodRole,
    api_of_job,
    api_of_kind,
    job_api,
    pytorchjob,
    trainjob,
)
from components.training_environment import JobComponent, job_component
from readers.job_state import job_state, progress_line
from tools import run_local
from tools.local_backends import ReplicaPlan, container, process


class EchoJobApi(JobApi):
    """One pod `<job>-echo-<index>` per `spec.pods`, rank 0's address `<job>-echo-0`."""

    name = "echojob"
    group, version, plural, kind = "echo.example", "v1", "echojobs", "EchoJob"
    container = "echo"
    replica_order = ("Echo",)
    master_addr_keys = ("ECHO_ADDR",)
    master_port_keys = ("ECHO_PORT",)

    def job_manifest(self, settings: Any, *, image: Any) -> dict[str, Any]:
        raise NotImplementedError

    def rank0_pod(self, settings: Any) -> str:
        return f"{settings.job.name}-echo-0"

    def logs_args(self, settings: Any) -> list[str]:
        return ["logs", f"pod/{self.rank0_pod(settings)}"]

    def job_image(self, job: Any) -> str | None:
        return None

    def pod_selector(self, job_name: str) -> str:
        return f"echo={job_name}"

    def identify(self, pod: Mapping[str, Any]) -> PodIdentity:
        name = pod["metadata"]["name"]
        return PodIdentity("Echo", int(name.rsplit("-", 1)[1]), name)

    def conditions(self, job: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[Any]:
        return list(job.get("status", {}).get("conditions", []))

    def pods(
        self, job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None
    ) -> list[PodRole]:
        name = job["metadata"]["name"]
        template = job["spec"]["template"]
        return [
            PodRole(
                name=f"{name}-echo-{index}",
                replica_type="Echo",
                index=index,
                template=template,
                container=template["spec"]["containers"][0],
                restart_policy="Never",
                env={
                    "ECHO_ADDR": self.master_address(job),
                    "ECHO_PORT": "7",
                    "ECHO_RANK": str(index),
                },
            )
            for index in range(job["spec"]["pods"])
        ]

    def master_address(self, job: Mapping[str, Any]) -> str:
        return f"{job['metadata']['name']}-echo-0"

    def master_port(self, job: Mapping[str, Any]) -> int:
        return 7

    def backoff_limit(self, job: Mapping[str, Any], runtime: Any = None) -> int | None:
        return None

    def active_deadline_seconds(self, job: Mapping[str, Any]) -> float | None:
        return None


ECHO = EchoJobApi()
JOB = {
    "apiVersion": "echo.example/v1",
    "kind": "EchoJob",
    "metadata": {"name": "hi", "namespace": "default"},
    "spec": {
        "pods": 2,
        "template": {
            "spec": {"containers": [{"name": "echo", "command": ["echo"], "args": ["hello"]}]}
        },
    },
}


@pytest.fixture
def with_echo(monkeypatch: pytest.MonkeyPatch) -> None:
    apis = {api.name: api for api in (pytorchjob.API, trainjob.API, ECHO)}
    monkeypatch.setattr(job_apis, "_registry", lambda: apis)


def test_the_registered_apis_are_distinct_and_complete() -> None:
    apis = [job_api("pytorchjob"), job_api("trainjob")]
    assert len({api.kind for api in apis}) == len({api.plural for api in apis}) == 2
    for api in apis:
        assert api_of_kind(api.kind) is api
        assert api.resource_type == f"kubernetes:{api.group}/{api.version}:{api.kind}"


@pytest.mark.usefixtures("with_echo")
def test_the_watch_tells_a_new_apis_job_in_its_own_words() -> None:
    job = {**JOB, "status": {"conditions": [{"type": "Running", "status": "True"}]}}
    pods = [
        {"metadata": {"name": f"hi-echo-{i}", "uid": str(i)}, "status": {"phase": "Running"}}
        for i in (1, 0)
    ]
    state = job_state(job, pods)
    assert state.api is ECHO
    assert [r.pod for r in state.replicas] == ["hi-echo-0", "hi-echo-1"]
    assert progress_line(state) == (
        "EchoJob default/hi Running [hi-echo-0 Running, hi-echo-1 Running]"
    )


@pytest.mark.usefixtures("with_echo")
def test_the_local_runner_runs_a_new_apis_pods_with_both_backends(tmp_path: Path) -> None:
    assert api_of_job(JOB) is ECHO
    commands, _ = process.replica_commands(
        JOB, ReplicaPlan("default", tmp_path, 4321), repo_root=tmp_path, visible_devices=["", ""]
    )
    assert [c.name for c in commands] == ["hi-echo-0", "hi-echo-1"]
    assert [c.env["ECHO_RANK"] for c in commands] == ["0", "1"]
    # The API's rendezvous keys are the ones moved to loopback and the free port.
    assert {(c.env["ECHO_ADDR"], c.env["ECHO_PORT"]) for c in commands} == {("127.0.0.1", "4321")}
    assert run_local.job_policy(JOB).success_replica == "hi-echo-0"
    containers, _ = container.replica_commands(
        JOB,
        ReplicaPlan("default", tmp_path, 4321),
        engine=container.Engine("podman"),
        image="img",
        run="r",
        workdir=tmp_path,
    )
    argv = containers[0].argv
    assert argv[argv.index("--add-host") + 1] == "hi-echo-0:127.0.0.1"
    assert "ECHO_PORT=4321" in argv


def test_every_job_api_names_the_component_the_training_environment_builds() -> None:
    """TrainingEnvironment asks the job API which component to build and builds each one the
    same way (`JobComponent`): no component's constructor may ask for more or other."""
    # Evaluated: training_environment.py's annotations are objects, the components' strings.
    uniform = inspect.signature(JobComponent.__init__, eval_str=True)
    for api in (pytorchjob.API, trainjob.API):
        component = job_component(api)
        assert issubclass(component, pulumi.ComponentResource), api.component
        assert inspect.signature(component.__init__, eval_str=True) == uniform, api.component
