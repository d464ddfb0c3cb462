"""builders.job_apis.trainjob against Trainer v2.3.0's rules, written from its sources
(trainjob_types.go, constants.go, plugins/torch/torch.go, plugins/jobset/builder.go), not from
the functions themselves: the TrainJob and TrainingRuntime the stack declares, the pods JobSet
creates for them and the environment the torch plugin injects."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from builders.job_apis import api_of_job, job_api
from builders.job_apis.trainjob import (
    injected_env,
    node_template,
    nproc_per_node,
    restart_policy,
    trainingruntime_manifest,
)
from builders.manifests import ENTRYPOINT, container_security_context, pod_security_context
from builders.stack_objects import stack_objects
from readers.job_state import job_state
from settings.stack import (
    TRAINER_UID,
    SettingsError,
    StackSettings,
    load_stack_file,
    parse_settings,
)
from tests.conftest import REPO_ROOT

API = job_api("trainjob")
JOB = "ddp-trainjob"  # job.name of the trainjob stack


def dev(**job: Any) -> StackSettings:
    settings = load_stack_file("trainjob", REPO_ROOT)
    return dataclasses.replace(settings, job=dataclasses.replace(settings.job, **job))


def objects(settings: StackSettings) -> Any:
    return stack_objects(
        settings, image="registry.example/trainer@sha256:" + "a" * 64, password=None
    )


def test_the_stack_declares_a_trainingruntime_and_a_trainjob_that_runs_on_it() -> None:
    stack = objects(dev())
    runtime, job = stack.runtime, stack.job
    assert [m["kind"] for m in stack.in_apply_order()] == [
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "TrainingRuntime",
        "TrainJob",
    ]
    assert job["apiVersion"] == runtime["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert job["spec"]["runtimeRef"] == {
        "name": runtime["metadata"]["name"],
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
    }
    assert runtime["metadata"]["namespace"] == job["metadata"]["namespace"] == "default"
    # The runtime's trainer job: the ancestor label and the `node` container Trainer looks for.
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    assert node["name"] == "node"
    assert node["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }
    assert node["template"]["spec"]["template"]["spec"]["containers"] == [{"name": "node"}]
    assert "torch" in runtime["spec"]["mlPolicy"]


def test_the_trainer_carries_image_command_args_resources_and_size() -> None:
    settings = dev()
    trainer = objects(settings).job["spec"]["trainer"]
    pytorchjob = stack_objects(
        dataclasses.replace(settings, job=dataclasses.replace(settings.job, api="pytorchjob")),
        image="x",
        password=None,
    ).job
    master = pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert trainer["image"] == "registry.example/trainer@sha256:" + "a" * 64
    assert trainer["command"] == [ENTRYPOINT]
    assert trainer["args"] == master["containers"][0]["args"]  # the same trainer CLI
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 1
    assert trainer["resourcesPerNode"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"memory": "2Gi"},
    }
    # The container's own, and the contract any script reads (CHECKPOINT_DIR, ...).
    assert trainer["env"] == master["containers"][0]["env"]
    assert {e["name"] for e in trainer["env"]} == {
        "PYTHONUNBUFFERED",
        "OMP_NUM_THREADS",
        "CHECKPOINT_DIR",
        "JOB_NAME",
        "STACK_NAME",
    }


def test_the_runtime_patch_mounts_the_claim_and_co_locates_the_pods() -> None:
    job = objects(dev()).job
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == "pytorch-distributed/pulumi"
    (replicated,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = replicated["template"]["spec"]["template"]["spec"]
    assert {
        "name": "checkpoints",
        "persistentVolumeClaim": {"claimName": f"{JOB}-checkpoints"},
    } in (pod["volumes"])
    assert pod["containers"] == [
        {
            "name": "node",
            "volumeMounts": [
                {"name": "checkpoints", "mountPath": "/checkpoints"},
                {"name": "dshm", "mountPath": "/dev/shm"},
            ],
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ]
    assert "podAffinity" in pod["affinity"]  # ReadWriteOnce, 2 nodes
    assert pod["terminationGracePeriodSeconds"] == 120


def test_a_registry_gives_the_pods_a_pull_secret_through_the_patch() -> None:
    values = {
        "image": {"build": True, "repository": "registry.example/team/trainer"},
        "registry": {"server": "registry.example", "username": "ci"},
        "job": {"api": "trainjob"},
    }
    settings = parse_settings(values, password="s3cret")
    job = stack_objects(settings, image="i", password="s3cret").job
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"
    ][0]["template"]["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "pytorch-ddp-registry"}]


def test_a_changed_restart_policy_is_a_new_runtime_and_so_a_new_trainjob() -> None:
    base = trainingruntime_manifest(dev())
    assert base is not None
    assert trainingruntime_manifest(dev(total_epochs=99)) == base  # a trainer change: same
    other = trainingruntime_manifest(dev(restart_policy="ExitCode"))
    assert other is not None
    assert other["metadata"]["name"] != base["metadata"]["name"]
    assert other["metadata"]["name"].startswith(f"{JOB}-")
    assert (
        objects(dev(restart_policy="ExitCode")).job["spec"]["runtimeRef"]["name"]
        == (other["metadata"]["name"])
    )


@pytest.mark.parametrize(
    ("policy", "job_spec", "pod_policy"),
    [
        ("OnFailure", {"backoffLimit": 3}, "OnFailure"),
        ("Never", {"backoffLimit": 0}, "Never"),
        (
            "ExitCode",
            {
                "backoffLimit": 0,
                "podFailurePolicy": {
                    "rules": [
                        {
                            "action": "Ignore",
                            "onExitCodes": {
                                "containerName": "node",
                                "operator": "In",
                                "values": list(range(128, 256)),
                            },
                        }
                    ]
                },
            },
            "Never",
        ),
    ],
)
def test_restart_policies_become_the_node_jobs_rules(
    policy: str, job_spec: dict[str, Any], pod_policy: str
) -> None:
    runtime = trainingruntime_manifest(dev(restart_policy=policy))
    assert runtime is not None
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert {k: v for k, v in node.items() if k != "template"} == job_spec
    assert node["template"]["spec"]["restartPolicy"] == pod_policy
    assert restart_policy(runtime) == policy  # what the local supervisor applies


def test_the_clusters_runtime_is_referenced_and_not_declared() -> None:
    stack = objects(dev(cluster_runtime="torch-distributed"))
    assert stack.runtime is None
    assert stack.job["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }


def test_each_pod_gets_what_the_torch_plugin_injects() -> None:
    stack = objects(dev())
    pods = API.pods(stack.job, stack.runtime)
    assert [pod.name for pod in pods] == [f"{JOB}-node-0-0", f"{JOB}-node-0-1"]
    for index, pod in enumerate(pods):
        assert pod.env == {
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "1",
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": f"{JOB}-node-0-0.{JOB}",
            "PET_MASTER_PORT": "29500",
            "JOB_COMPLETION_INDEX": str(index),  # Kubernetes' Job controller, Indexed Jobs
        }
        assert pod.restart_policy == "OnFailure"
        assert pod.container["name"] == "node"
        assert pod.container["ports"] == [{"containerPort": 29500}]
    assert API.master_address(stack.job) == f"{JOB}-node-0-0.{JOB}"


def test_nproc_per_node_auto_is_the_cpu_request_without_gpus() -> None:
    job = objects(dev()).job
    trainer = job["spec"]["trainer"]
    del trainer["numProcPerNode"]
    trainer["resourcesPerNode"]["requests"]["cpu"] = "4"
    assert nproc_per_node(job) == "4"
    trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = "2"
    assert nproc_per_node(job) == "auto"


def test_the_node_template_layers_trainer_env_over_the_runtimes() -> None:
    stack = objects(dev())
    runtime = stack.runtime
    container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]["containers"][0]
    container["env"] = [{"name": "OMP_NUM_THREADS", "value": "8"}, {"name": "KEEP", "value": "1"}]
    env = {
        e["name"]: e["value"]
        for e in node_template(stack.job, runtime)["spec"]["containers"][0]["env"]
    }
    assert env == {
        "OMP_NUM_THREADS": "1",
        "KEEP": "1",
        "PYTHONUNBUFFERED": "1",
        "CHECKPOINT_DIR": "/checkpoints/ddp-trainjob",
        "JOB_NAME": "ddp-trainjob",
        "STACK_NAME": "trainjob",
    }


def test_the_pods_jobset_makes_are_restricted_and_hold_no_token() -> None:
    """The patch carries the pod's and the `node` container's securityContext (PodSpecPatch has
    both), the stack's runtime the token's absence (no patch can set it)."""
    stack = objects(dev())
    runtime_pod = stack.runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"
    ]["template"]["spec"]
    assert runtime_pod["automountServiceAccountToken"] is False
    for pod in API.pods(stack.job, stack.runtime):
        spec = pod.template["spec"]
        assert spec["securityContext"] == pod_security_context(dev())
        assert pod.container["securityContext"] == container_security_context()
        assert spec["automountServiceAccountToken"] is False


def test_the_patch_merges_into_the_runtimes_security_context_field_by_field() -> None:
    stack = objects(dev())
    pod = stack.runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]
    pod["securityContext"] = {"supplementalGroups": [5], "runAsUser": 0}
    pod["containers"][0]["securityContext"] = {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": True,
    }
    template = node_template(stack.job, stack.runtime)
    assert template["spec"]["securityContext"] == {
        **pod_security_context(dev()),
        "supplementalGroups": [5],
    }
    assert template["spec"]["containers"][0]["securityContext"] == {
        **container_security_context(),
        "readOnlyRootFilesystem": True,
    }


def test_a_trainjob_that_runs_as_root_says_so_in_its_patch() -> None:
    values = {"image": {"build": False, "ref": "r/t:1"}, "job": {"api": "trainjob"}}
    root = parse_settings({**values, "job": {"api": "trainjob", "runAsRoot": True}})
    stack = objects(root)
    (pod, *_) = API.pods(stack.job, stack.runtime)
    assert pod.template["spec"]["securityContext"]["runAsUser"] == 0
    assert pod.template["spec"]["securityContext"]["runAsNonRoot"] is False
    assert parse_settings(values).job.run_as_user == TRAINER_UID


def test_a_node_index_outside_the_job_is_refused() -> None:
    with pytest.raises(ValueError, match=r"node index 2 is outside 0\.\.1"):
        injected_env(objects(dev()).job, 2)


def pod(index: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{JOB}-node-0-{index}-x7k2p",
            "uid": f"u{index}",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": JOB,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        },
        "spec": {"hostname": f"{JOB}-node-0-{index}", "subdomain": JOB},
        "status": {
            "phase": phase,
            "startTime": f"2026-12-03T19:0{index}:00Z",
            "containerStatuses": [{"name": "node", "restartCount": 0, "state": {"running": {}}}],
        },
    }


def trainjob(*conditions: dict[str, Any]) -> dict[str, Any]:
    job = objects(dev()).job
    return {
        **job,
        "metadata": {**job["metadata"], "uid": "t"},
        "status": {"conditions": list(conditions)},
    }


def test_a_trainjob_runs_once_all_its_pods_run_and_completes_as_succeeded() -> None:
    assert job_state(trainjob(), [pod(0), pod(1, "Pending")]).phase == "Pending"
    running = job_state(trainjob(), [pod(1), pod(0)])
    assert running.kind == "TrainJob" and running.is_true("Running")
    assert running.phase == "Running"
    assert [(r.replica_type, r.index, r.role) for r in running.replicas] == [
        ("Node", 0, f"{JOB}-node-0-0"),
        ("Node", 1, f"{JOB}-node-0-1"),
    ]
    complete = {
        "type": "Complete",
        "status": "True",
        "reason": "JobSetCompleted",
        "message": "jobset completed successfully",
        "lastTransitionTime": "2026-12-03T19:10:00Z",
    }
    done = job_state(trainjob(complete), [pod(0, "Succeeded"), pod(1, "Succeeded")])
    assert done.outcome == "Succeeded" and not done.is_true("Running")
    assert done.title == f"TrainJob default/{JOB}"


def test_kubectl_commands_find_rank_0_by_its_completion_index() -> None:
    settings = dev()
    selector = (
        f"jobset.sigs.k8s.io/jobset-name={JOB},jobset.sigs.k8s.io/replicatedjob-name=node,"
        "batch.kubernetes.io/job-completion-index=0"
    )
    assert API.logs_args(settings) == [
        "logs",
        "--follow",
        "--selector",
        selector,
        "--container",
        "node",
    ]
    assert API.job_image(objects(settings).job) == objects(settings).job["spec"]["trainer"]["image"]
    assert API.status_resource(JOB) == f"trainjobs.trainer.kubeflow.org/{JOB}"
    assert api_of_job(objects(settings).job) is API


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"platform": "runai", "runaiProject": "team", "job": {"api": "trainjob"}},
            "invalid config pytorch-distributed:job.api = 'trainjob': platform runai schedules "
            "PyTorchJob",
        ),
        (
            {"job": {"api": "trainjob", "elastic": {"minNodes": 1}}},
            "invalid config pytorch-distributed:job.elastic = 'set': job.api: trainjob runs jobs "
            "of a fixed size only",
        ),
        (
            {"job": {"clusterRuntime": "torch-distributed"}},
            "invalid config pytorch-distributed:job.clusterRuntime = 'torch-distributed': only "
            "allowed with job.api: trainjob",
        ),
        (
            {"job": {"api": "tfjob"}},
            "invalid config pytorch-distributed:job.api = 'tfjob': expected one of pytorchjob, "
            "trainjob",
        ),
    ],
)
def test_what_a_trainjob_cannot_do_is_one_line_naming_the_key(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError) as error:
        parse_settings({"image": {"build": False, "ref": "trainer:1"}, **values})
    assert str(error.value).startswith(message), str(error.value)


def test_the_container_backend_resolves_rank_0s_name_to_loopback(tmp_path: Path) -> None:
    from tools.local_backends import ReplicaPlan
    from tools.local_backends import container as container_backend

    stack = objects(dev())
    commands, notices = container_backend.replica_commands(
        stack.job,
        ReplicaPlan("default", tmp_path, 4321, stack.runtime),
        engine=container_backend.Engine("podman"),
        image="img",
        run="r",
        workdir=tmp_path,
    )
    assert notices == []
    assert [c.name for c in commands] == [f"{JOB}-node-0-0", f"{JOB}-node-0-1"]
    argv = commands[1].argv
    assert argv[argv.index("--add-host") + 1] == f"{JOB}-node-0-0.{JOB}:127.0.0.1"
    env = [argv[i + 1] for i, part in enumerate(argv) if part == "--env"]
    assert "PET_MASTER_PORT=4321" in env and "PET_NODE_RANK=1" in env
    assert f"PET_MASTER_ADDR={JOB}-node-0-0.{JOB}" in env  # resolved by --add-host
    assert f"{tmp_path}:/checkpoints" in argv
    assert commands[1].restart_policy == "OnFailure"
