"""builders/job_apis/pytorchjob.py: the PyTorchJob a stack declares (its replicas, run policy,
elastic policy and what the operator's webhook admits), the environment the operator injects, and
the init container its workers run.

The environment rules are checked against tables written from training-operator v1.9's rules
(envvar.go, master.go, elastic.go and the API defaulter pytorch_defaults.go), not from the
function itself.

The rules, as the tables below encode them: PYTHONUNBUFFERED is "1" in every pod; a job with a
Master gets MASTER_*/PET_MASTER_* (the master's service and its pytorchjob-port), WORLD_SIZE =
pods x integer nprocPerNode (else 1 per pod), RANK = PET_NODE_RANK = index (+1 for workers);
PET_NPROC_PER_NODE is spec.nprocPerNode (defaulted to "auto") whenever it is set, Master or not;
PET_NNODES is the pod count, or "min:max" with an elasticPolicy, which also brings
PET_RDZV_ENDPOINT (`<job>-worker-0`:worker port unless rdzvHost/rdzvPort), PET_RDZV_BACKEND
("c10d" unless rdzvBackend) and, when set, PET_MAX_RESTARTS, PET_RDZV_ID, PET_RDZV_CONF, and
PET_STANDALONE.

RESTRICTED_INIT_CONTAINER_TEMPLATE is checked against the training operator v1.9.4's own init
container (pkg/controller.v1/pytorch/initcontainer.go): the same container once the operator
fills its fields in, with what Pod Security "restricted" asks of a container, so Worker pods with
it pass the policy pack's rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from builders.job_apis import JobApiError as OperatorEnvError
from builders.job_apis import api_of_settings
from builders.job_apis.pytorchjob import (
    CONTAINER_NAME,
    MASTER_PORT,
    RESTRICTED_INIT_CONTAINER_TEMPLATE,
    injected_env,
    pod_name,
    pytorchjob_manifest,
    replica_pods,
)
from builders.manifests import ENTRYPOINT, container_security_context
from policy.rules import pod_security
from policy.rules.model import PYTORCHJOB_TYPE
from policy.rules.operator import admission_violations
from settings.stack import load_stack_file, parse_settings
from tests.builders.k8s_rules import validate_manifest
from tests.builders.stack_settings import IMAGE, container, elastic, replicas, settings_for
from tests.conftest import REPO_ROOT


def job(
    name: str = "big",
    *,
    workers: int | None = 3,
    master: bool = True,
    nproc: str | None = "8",
    port: int | None = 29400,
    elastic: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ports = [{"name": "pytorchjob-port", "containerPort": port}] if port is not None else []
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x", "ports": ports}]}}
    specs: dict[str, Any] = {}
    if master:
        specs["Master"] = {"replicas": 1, "template": template}
    if workers is not None:
        specs["Worker"] = {"replicas": workers, "template": template}
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if nproc is not None:
        spec["nprocPerNode"] = nproc
    if elastic is not None:
        spec["elasticPolicy"] = elastic
    return {"metadata": {"name": name}, "spec": spec}


def test_dev_stack_pods_get_what_the_operator_injects() -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    manifest = pytorchjob_manifest(settings, image="local")
    common = {
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "ddp-dev-master-0",
        "PET_MASTER_ADDR": "ddp-dev-master-0",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "WORLD_SIZE": "2",  # 2 pods x nprocPerNode "1"
        "PET_NPROC_PER_NODE": "1",
        "PET_NNODES": "2",
    }

    assert injected_env(manifest, "Master", 0) == {**common, "RANK": "0", "PET_NODE_RANK": "0"}
    assert injected_env(manifest, "Worker", 0) == {**common, "RANK": "1", "PET_NODE_RANK": "1"}


def test_worker_ranks_follow_the_master_and_world_size_counts_processes() -> None:
    spec = job()  # 1 master + 3 workers, nprocPerNode "8", port 29400

    env = injected_env(spec, "Worker", 2)

    assert env == {
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "big-master-0",
        "PET_MASTER_ADDR": "big-master-0",
        "MASTER_PORT": "29400",
        "PET_MASTER_PORT": "29400",
        "WORLD_SIZE": "32",
        "RANK": "3",
        "PET_NODE_RANK": "3",
        "PET_NPROC_PER_NODE": "8",
        "PET_NNODES": "4",
    }


@pytest.mark.parametrize("nproc", ["auto", None])
def test_non_integer_nproc_per_node_counts_one_process_per_pod(nproc: str | None) -> None:
    env = injected_env(job(nproc=nproc), "Master", 0)

    assert env["WORLD_SIZE"] == "4"  # 4 pods, one process each as far as the operator knows
    assert env["PET_NPROC_PER_NODE"] == "auto"  # the API default, passed through for torchrun


def test_missing_port_falls_back_to_the_defaulted_23456() -> None:
    assert injected_env(job(port=None), "Worker", 0)["MASTER_PORT"] == "23456"


def test_elastic_jobs_get_the_rendezvous_and_a_node_range() -> None:
    spec = job(elastic={"minReplicas": 1, "maxReplicas": 4})  # 1 master + 3 workers, port 29400

    env = injected_env(spec, "Worker", 0)

    assert {key: value for key, value in env.items() if key.startswith("PET_")} == {
        "PET_MASTER_ADDR": "big-master-0",
        "PET_MASTER_PORT": "29400",
        "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "8",
        "PET_RDZV_ENDPOINT": "big-worker-0:29400",  # the first worker's service, worker port
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": "1:4",
    }


def test_elastic_policy_fields_each_become_their_variable() -> None:
    policy = {
        "maxReplicas": 5,  # the defaulter copies it to minReplicas
        "rdzvHost": "rdzv.example",
        "rdzvPort": 1234,
        "rdzvBackend": "etcd",
        "rdzvId": "run-7",
        "rdzvConf": [{"key": "timeout", "value": "60"}, {"key": "read_timeout", "value": "9"}],
        "maxRestarts": 3,
        "standalone": True,
    }

    env = injected_env(job(master=False, nproc=None, elastic=policy), "Worker", 2)

    assert env == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_RDZV_ENDPOINT": "rdzv.example:1234",
        "PET_RDZV_BACKEND": "etcd",
        "PET_NNODES": "5:5",
        "PET_MAX_RESTARTS": "3",
        "PET_RDZV_ID": "run-7",
        "PET_RDZV_CONF": "timeout=60,read_timeout=9",
        "PET_STANDALONE": "",
    }


def test_an_empty_elastic_policy_ranges_over_the_worker_count() -> None:
    env = injected_env(job(master=False, workers=3, elastic={}), "Worker", 0)
    assert env["PET_NNODES"] == "3:3"


def test_the_deprecated_elastic_nproc_replaces_the_defaulted_one() -> None:
    env = injected_env(job(master=False, nproc=None, elastic={"nProcPerNode": 4}), "Worker", 0)
    assert env["PET_NPROC_PER_NODE"] == "4"
    with pytest.raises(OperatorEnvError, match=r"must not be used with spec\.nprocPerNode"):
        injected_env(job(master=False, nproc="2", elastic={"nProcPerNode": 4}), "Worker", 0)


def test_an_elastic_job_needs_workers() -> None:
    with pytest.raises(OperatorEnvError, match="needs a Worker replica spec"):
        injected_env(job(workers=None, elastic={}), "Master", 0)


def test_without_a_master_the_process_count_is_still_set() -> None:
    assert injected_env(job(master=False), "Worker", 1) == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "8",
        "PET_NNODES": "3",
    }
    # Unset in the spec: the defaulter's "auto" is what the operator passes.
    assert injected_env(job(master=False, nproc=None), "Worker", 0)["PET_NPROC_PER_NODE"] == "auto"


def test_pods_are_named_and_ordered_like_the_operator_does() -> None:
    assert replica_pods(job(workers=2)) == [("Master", 0), ("Worker", 0), ("Worker", 1)]
    assert pod_name("big", "Worker", 1) == "big-worker-1"


def test_replica_outside_the_spec_is_rejected() -> None:
    with pytest.raises(OperatorEnvError, match=r"Worker index 3 is outside 0\.\.2"):
        injected_env(job(), "Worker", 3)
    with pytest.raises(OperatorEnvError, match="no 'Worker' replica spec"):
        injected_env(job(workers=None), "Worker", 0)


def test_tutorial_job_shape() -> None:
    settings = settings_for()
    manifest = pytorchjob_manifest(settings, image=IMAGE)
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert manifest["metadata"]["name"] == "pytorch-ddp"
    assert manifest["metadata"]["namespace"] == "default"
    assert manifest["spec"]["nprocPerNode"] == "1"
    assert set(replicas(manifest)) == {"Master", "Worker"}
    assert replicas(manifest)["Master"]["replicas"] == 1
    assert replicas(manifest)["Worker"]["replicas"] == 1
    for replica_type in ("Master", "Worker"):
        replica = replicas(manifest)[replica_type]
        assert replica["restartPolicy"] == "ExitCode"
        pod = replica["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] >= 60
        main = container(manifest, replica_type)
        assert main["name"] == CONTAINER_NAME == "pytorch"
        assert main["image"] == IMAGE
        assert main["command"] == [ENTRYPOINT]
        assert main["args"] == [
            "--max-restarts",
            "0",
            "--",
            "--batch_size",
            "32",
            "100",
            "25",
            "--checkpoint-dir",
            "/checkpoints/pytorch-ddp",
            "--dataset-size",
            "2048",
        ]
        assert {"name": "pytorchjob-port", "containerPort": MASTER_PORT, "protocol": "TCP"} in main[
            "ports"
        ]
        env = {item["name"]: item["value"] for item in main["env"]}
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["OMP_NUM_THREADS"] == "4"
        assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert main["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
        mounts = {mount["mountPath"]: mount["name"] for mount in main["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        claim_volume = volumes[mounts["/checkpoints"]]
        assert claim_volume["persistentVolumeClaim"] == {"claimName": "pytorch-ddp-checkpoints"}
        assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory"}
        assert "imagePullSecrets" not in pod
        assert "schedulerName" not in pod
        assert "affinity" not in pod
    # ExitCode's retries are bounded by the deadline alone (the operator ignores backoffLimit).
    assert manifest["spec"]["runPolicy"] == {
        "backoffLimit": 3,
        "cleanPodPolicy": "Running",
        "activeDeadlineSeconds": 7 * 24 * 3600,
    }


@pytest.mark.parametrize(
    ("job", "policy", "deadline"),
    [
        ({"restartPolicy": "OnFailure"}, "OnFailure", None),
        ({"restartPolicy": "Never"}, "Never", None),
        ({"restartPolicy": "OnFailure", "activeDeadlineSeconds": 600}, "OnFailure", 600),
        ({"activeDeadlineSeconds": 3600}, "ExitCode", 3600),
    ],
)
def test_restart_policy_and_its_deadline(
    job: dict[str, Any], policy: str, deadline: int | None
) -> None:
    manifest = pytorchjob_manifest(settings_for(job=job), image=IMAGE)
    assert {spec["restartPolicy"] for spec in replicas(manifest).values()} == {policy}
    assert manifest["spec"]["runPolicy"].get("activeDeadlineSeconds") == deadline
    assert admission_violations(manifest) == []


def test_single_node_has_no_worker_and_cpu_has_no_gpu() -> None:
    manifest = pytorchjob_manifest(
        settings_for(job={"nodes": 1, "gpusPerNode": 0, "cpu": "500m"}), image=IMAGE
    )
    assert set(replicas(manifest)) == {"Master"}
    assert manifest["spec"]["nprocPerNode"] == "1"
    limits = container(manifest)["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits
    env = {item["name"]: item["value"] for item in container(manifest)["env"]}
    assert env["OMP_NUM_THREADS"] == "1"


def test_multi_gpu_nodes() -> None:
    manifest = pytorchjob_manifest(
        settings_for(job={"nodes": 4, "gpusPerNode": 8, "cpu": "32"}), image=IMAGE
    )
    assert replicas(manifest)["Worker"]["replicas"] == 3
    assert manifest["spec"]["nprocPerNode"] == "8"
    assert container(manifest, "Worker")["resources"]["limits"]["nvidia.com/gpu"] == "8"
    env = {item["name"]: item["value"] for item in container(manifest)["env"]}
    assert env["OMP_NUM_THREADS"] == "4"


def test_optional_job_fields() -> None:
    manifest = pytorchjob_manifest(
        settings_for(
            job={
                "task": "trainer.tasks:regression",
                "maxRestarts": 2,
                "ttlSecondsAfterFinished": 600,
                "activeDeadlineSeconds": 7200,
                "cleanPodPolicy": "All",
            }
        ),
        image=IMAGE,
    )
    args = container(manifest)["args"]
    assert args[:2] == ["--max-restarts", "2"]
    assert args[-2:] == ["--task", "trainer.tasks:regression"]
    assert manifest["spec"]["runPolicy"] == {
        "backoffLimit": 3,
        "cleanPodPolicy": "All",
        "ttlSecondsAfterFinished": 600,
        "activeDeadlineSeconds": 7200,
    }


def test_an_elastic_job_is_workers_only_with_a_c10d_elastic_policy() -> None:
    manifest = pytorchjob_manifest(elastic(maxRestarts=5), image=IMAGE)
    spec = manifest["spec"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert spec["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 3,
        "rdzvBackend": "c10d",
        "maxRestarts": 5,
    }
    assert spec["nprocPerNode"] == "2"  # the current field; elasticPolicy.nProcPerNode is unset
    assert "schedulingPolicy" not in spec["runPolicy"]  # no gang scheduler on plain Kubeflow
    assert admission_violations(manifest) == []
    validate_manifest(manifest)
    assert api_of_settings(elastic()).rank0_pod(elastic()) == "elastic-worker-0"


def test_every_pod_joins_the_rendezvous_on_worker_0_with_the_node_range() -> None:
    manifest = pytorchjob_manifest(elastic(), image=IMAGE)
    assert replica_pods(manifest) == [("Worker", 0), ("Worker", 1), ("Worker", 2)]
    for _, index in replica_pods(manifest):
        env = injected_env(manifest, "Worker", index)
        assert env["PET_NNODES"] == "1:3"
        assert env["PET_RDZV_ENDPOINT"] == "elastic-worker-0:23456"
        assert env["PET_RDZV_BACKEND"] == "c10d"
        assert env["PET_MAX_RESTARTS"] == "3"
        assert "PET_NODE_RANK" not in env and "MASTER_ADDR" not in env  # c10d assigns ranks


def test_on_runai_the_gang_minimum_is_the_fewest_nodes() -> None:
    values: dict[str, Any] = {
        "platform": "runai",
        "runaiProject": "team-a",
        "image": {"repository": "registry.example.com/ml/trainer"},
        "job": {"nodes": 4, "elastic": {"minNodes": 2}},
    }
    manifest = pytorchjob_manifest(parse_settings(values), image=IMAGE)
    assert manifest["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}
    assert manifest["spec"]["elasticPolicy"]["minReplicas"] == 2
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["schedulerName"] == "runai-scheduler"
    assert admission_violations(manifest) == []


# The operator's built-in template (initContainerTemplate in initcontainer.go, v1.9.4).
BUILT_IN = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']"""  # noqa: E501
FIELDS = {
    "{{.InitContainerImage}}": "alpine:3.10",
    "{{.MaxTries}}": "100",
    "{{.MasterAddr}}": "ddp-dev-master-0",
}


def filled(template: str) -> list[dict]:
    """The template as the operator executes it (Go template fields) and parses it (YAML)."""
    for field, value in FIELDS.items():
        template = template.replace(field, value)
    return yaml.safe_load(template)


def test_the_template_is_the_operators_container_with_restricted_security() -> None:
    (ours,) = filled(RESTRICTED_INIT_CONTAINER_TEMPLATE)
    (theirs,) = filled(BUILT_IN)
    assert ours["securityContext"] == container_security_context()
    assert {k: v for k, v in ours.items() if k not in ("securityContext", "command")} == {
        k: v for k, v in theirs.items() if k != "command"
    }
    # The same shell loop, spaced differently (a folded YAML scalar, to fit the page).
    assert ours["command"][:2] == theirs["command"][:2] == ["sh", "-c"]
    assert ours["command"][2].replace(" ", "") == theirs["command"][2].replace(" ", "")


def test_worker_pods_with_it_meet_restricted_and_with_the_built_in_do_not() -> None:
    job = pytorchjob_manifest(load_stack_file("dev", REPO_ROOT), image="img@sha256:" + "0" * 64)
    rules = (pod_security.no_privilege_escalation, pod_security.drop_capabilities)
    for template, refused in ((RESTRICTED_INIT_CONTAINER_TEMPLATE, False), (BUILT_IN, True)):
        injected = copy.deepcopy(job)
        worker = injected["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        worker["initContainers"] = filled(template)
        messages = [m for rule in rules for m in rule(PYTORCHJOB_TYPE, injected)]
        assert bool(messages) is refused, messages
