"""builders/manifests.py and both job APIs with your own code, data and cluster (issue 30): the
command, the environment's contract, plain and secret variables, data claims, scheduling and the
GPU resource, on a PyTorchJob's pods and a TrainJob's alike."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pulumi
import pytest

from builders.job_apis import api_of_settings
from builders.job_apis.trainjob import node_template
from builders.manifests import (
    ENTRYPOINT,
    GPU_RESOURCE_ANNOTATION,
    TRAINER_ARGUMENTS,
    environment_secret_manifest,
    resource_names,
)
from builders.stack_objects import stack_objects
from settings.stack import (
    REDACTED,
    StackSettings,
    job_key,
    load_stack_file,
    parse_settings,
    trainer_settings,
)
from tests.builders import pod_templates
from tests.builders.k8s_rules import restricted_violations, validate_core, validate_manifest

IMAGE = "registry.example.com/ml/digits@sha256:" + "d" * 64
OWN_CODE: dict[str, Any] = {
    "command": ["train.py", "--epochs", "3"],
    "env": {"DATA_DIR": "/data", "OMP_NUM_THREADS": "2"},
    "secretEnv": {"HF_TOKEN": REDACTED},
    "volumes": [
        {"claim": "digits-data", "mountPath": "/data"},
        {"claim": "scratch", "mountPath": "/scratch", "readOnly": False},
    ],
    "nodeSelector": {"example.com/pool": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "priorityClassName": "training",
}


def settings_for(api: str = "pytorchjob", **job: Any) -> StackSettings:
    values = {
        "image": {"repository": "registry.example.com/ml/digits", "context": "examples/digits"},
        "job": {"name": "digits", "api": api, **job},
    }
    return parse_settings(values, stack="digits")


def pods(settings: StackSettings) -> list[dict[str, Any]]:
    return pod_templates.pods(settings, IMAGE)


API = pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])


@API
def test_the_trainer_runs_by_default_and_a_command_of_your_own_under_torchrun(api: str) -> None:
    trainer = pod_templates.training_container(pods(settings_for(api))[0])
    assert trainer["command"] == [ENTRYPOINT]
    assert "--" in trainer["args"]
    own = pod_templates.training_container(
        pods(settings_for(api, command=["train.py", "--epochs", "3"]))[0]
    )
    # torchrun takes nodes, rank and rendezvous from the controller's PET_* variables.
    assert own["command"] == ["torchrun"]
    assert own["args"] == ["--max-restarts", "0", "train.py", "--epochs", "3"]
    # Your image's WORKDIR, as `docker run` would start it.
    assert "workingDir" not in own


def test_launcher_none_runs_the_command_as_the_containers_own() -> None:
    own = pod_templates.training_container(
        pods(settings_for(command=["bash", "run.sh"], launcher="none", maxRestarts=2))[0]
    )
    assert (own["command"], own["args"]) == (["bash", "run.sh"], [])


def test_torchruns_restarts_are_the_jobs_or_the_elastic_ones() -> None:
    fixed = pod_templates.training_container(pods(settings_for(command=["t.py"], maxRestarts=2))[0])
    assert fixed["args"][:2] == ["--max-restarts", "2"]
    elastic = settings_for(command=["t.py"], nodes=3, elastic={"minNodes": 2, "maxRestarts": 5})
    container = pod_templates.training_container(pods(elastic)[0])
    assert container["args"][:2] == ["--max-restarts", "5"]
    # What entrypoint.sh sets for the trainer's elastic pods (a node that joins late).
    assert pod_templates.env_of(container)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in pod_templates.env_of(
        pod_templates.training_container(pods(settings_for(command=["t.py"]))[0])
    )


@API
def test_every_pod_is_told_its_checkpoint_dir_job_and_stack(api: str) -> None:
    for settings in (settings_for(api), settings_for(api, command=["t.py"])):
        for pod in pods(settings):
            env = pod_templates.env_of(pod_templates.training_container(pod))
            assert env["CHECKPOINT_DIR"] == "/checkpoints/digits" == settings.checkpoint_dir
            assert (env["JOB_NAME"], env["STACK_NAME"]) == ("digits", "digits")


@API
def test_plain_variables_are_values_and_secret_ones_references_to_the_stacks_secret(
    api: str,
) -> None:
    settings = settings_for(api, **OWN_CODE)
    secret = resource_names(settings).env_secret
    assert secret == "digits-env"
    for pod in pods(settings):
        env = pod_templates.env_of(pod_templates.training_container(pod))
        assert env["DATA_DIR"] == "/data"
        assert env["OMP_NUM_THREADS"] == "2"  # job.env's, over the stack's own
        assert env["HF_TOKEN"] == {"secretKeyRef": {"name": secret, "key": "HF_TOKEN"}}
        assert [e["name"] for e in pod_templates.training_container(pod)["env"]].count(
            "OMP_NUM_THREADS"
        ) == 1


def test_the_environments_secret_holds_the_values_and_nothing_else_does() -> None:
    settings = settings_for(**OWN_CODE)
    objects = stack_objects(settings, image=IMAGE, password=None)
    assert [manifest["kind"] for manifest in objects.in_apply_order()] == [
        "NetworkPolicy",
        "Secret",
        "PersistentVolumeClaim",
        "PyTorchJob",
    ]
    secret = objects.env_secret
    assert secret is not None and secret == environment_secret_manifest(settings)
    assert (secret["type"], secret["metadata"]["name"]) == ("Opaque", "digits-env")
    assert secret["data"] == {"HF_TOKEN": base64.b64encode(REDACTED.encode()).decode()}
    validate_manifest(secret)
    assert environment_secret_manifest(settings_for()) is None


def test_a_secret_value_stays_a_secret_output_into_the_secrets_data() -> None:
    captured: dict[str, Any] = {}

    async def check() -> None:
        settings = settings_for(secretEnv={"HF_TOKEN": pulumi.Output.secret("hf_s3cr3t")})
        manifest = environment_secret_manifest(settings)
        assert manifest is not None
        data = manifest["data"]["HF_TOKEN"]
        captured["secret"] = await data.is_secret()
        captured["value"] = await data.future()
        # The job names the Secret and the key only (its manifest makes no Output to await).
        captured["job"] = repr(api_of_settings(settings).job_manifest(settings, image=IMAGE))

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(check())
    finally:
        loop.close()
    assert captured["secret"] is True
    assert base64.b64decode(captured["value"]) == b"hf_s3cr3t"
    assert "hf_s3cr3t" not in captured["job"]


@API
def test_data_claims_are_mounted_read_only_unless_said_beside_the_checkpoints(api: str) -> None:
    for pod in pods(settings_for(api, **OWN_CODE)):
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["data-0"]["persistentVolumeClaim"] == {
            "claimName": "digits-data",
            "readOnly": True,
        }
        assert volumes["data-1"]["persistentVolumeClaim"] == {
            "claimName": "scratch",
            "readOnly": False,
        }
        assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "digits-checkpoints"
        mounts = {m["name"]: m for m in pod_templates.training_container(pod)["volumeMounts"]}
        assert mounts["data-0"] == {"name": "data-0", "mountPath": "/data", "readOnly": True}
        assert mounts["data-1"]["readOnly"] is False
        assert mounts["checkpoints"]["mountPath"] == "/checkpoints"


def test_a_pytorchjobs_pods_carry_the_scheduling_settings() -> None:
    for pod in pods(settings_for(**OWN_CODE)):
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"example.com/pool": "gpu"}
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        assert spec["priorityClassName"] == "training"
    plain = pods(settings_for())[0]["spec"]
    assert not {"nodeSelector", "tolerations", "priorityClassName"} & set(plain)


def test_a_trainjobs_patch_schedules_its_pods_and_its_runtime_gives_their_priority() -> None:
    settings = settings_for("trainjob", **OWN_CODE)
    objects = stack_objects(settings, image=IMAGE, password=None)
    patch = objects.job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod_patch = patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod_patch["nodeSelector"] == {"example.com/pool": "gpu"}
    assert pod_patch["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    # A runtime patch has no priorityClassName: the stack's runtime carries it (and its digest).
    assert "priorityClassName" not in pod_patch
    assert objects.runtime is not None
    runtime_pod = objects.runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"
    ]["template"]["spec"]
    assert runtime_pod["priorityClassName"] == "training"
    plain = stack_objects(settings_for("trainjob"), image=IMAGE, password=None).runtime
    assert plain is not None and plain["metadata"]["name"] != objects.runtime["metadata"]["name"]
    pod = node_template(objects.job, objects.runtime)["spec"]
    assert pod["priorityClassName"] == "training" and pod["nodeSelector"]


@API
def test_the_gpus_are_asked_as_the_configured_resource_which_the_job_states(api: str) -> None:
    settings = settings_for(api, gpusPerNode=2, gpuResource="nvidia.com/mig-1g.10gb")
    for pod in pods(settings):
        limits = pod_templates.training_container(pod)["resources"]["limits"]
        assert limits["nvidia.com/mig-1g.10gb"] == "2" and "nvidia.com/gpu" not in limits
    job = stack_objects(settings, image=IMAGE, password=None).job
    assert job["metadata"]["annotations"][GPU_RESOURCE_ANNOTATION] == "nvidia.com/mig-1g.10gb"
    nvidia = stack_objects(settings_for(api, gpusPerNode=2), image=IMAGE, password=None).job
    assert GPU_RESOURCE_ANNOTATION not in nvidia["metadata"]["annotations"]


@API
def test_everything_validates_and_stays_restricted(api: str) -> None:
    settings = settings_for(api, **OWN_CODE)
    objects = stack_objects(settings, image=IMAGE, password=None)
    for manifest in objects.in_apply_order():
        if manifest["apiVersion"].startswith("trainer.kubeflow.org"):
            continue  # custom resources: their pods are checked below
        validate_manifest(manifest)
    for index, pod in enumerate(pods(settings)):
        template = {"metadata": pod["metadata"], "spec": pod["spec"]}
        validate_core(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"p{index}"},
                "template": template,
            }
        )
    for manifest in (objects.job, objects.runtime):
        if manifest is not None:
            assert restricted_violations(manifest) == [], manifest["kind"]


def test_the_trainer_only_keys_are_the_trainers_arguments() -> None:
    """What job.command refuses beside it is exactly what reaches the trainer's command line."""
    carried = {argument.setting for argument in TRAINER_ARGUMENTS if argument.attribute}
    assert {f"job.{setting.key}" for setting in trainer_settings()} == carried
    assert all(job_key(argument.attribute) for argument in TRAINER_ARGUMENTS if argument.attribute)


def test_the_example_stack_trains_its_own_script_on_tolerated_nodes(repo_root: Path) -> None:
    settings = load_stack_file("digits", repo_root)
    assert (settings.image.context, settings.image.dockerfile) == (
        "examples/digits",
        "examples/digits/Dockerfile",
    )
    [pod, *_] = pods(settings)
    container = pod_templates.training_container(pod)
    assert container["command"] == ["torchrun"]
    assert container["args"][2:] == ["train.py", "--epochs", "30"]
    assert pod_templates.env_of(container)["DATA_DIR"] == "/data"
    assert any(
        v.get("persistentVolumeClaim", {}).get("claimName") == "digits-data"
        for v in pod["spec"]["volumes"]
    )
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    for manifest in stack_objects(settings, image=IMAGE, password=None).in_apply_order():
        validate_manifest(manifest)


def test_make_checkpoints_reader_goes_where_the_jobs_pods_go_without_their_priority() -> None:
    from builders.manifests import checkpoint_reader_pod_manifest

    settings = settings_for(**OWN_CODE)
    pod = checkpoint_reader_pod_manifest(
        settings,
        name="digits-reader",
        image=IMAGE,
        pull_secret=None,
        node="n1",
        deadline_seconds=60,
    )
    validate_manifest(pod)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"example.com/pool": "gpu"}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "priorityClassName" not in spec
    assert spec["affinity"]["nodeAffinity"]  # beside a ReadWriteOnce claim's pod, as before
    # Only the checkpoint claim: a data claim is not the reader's business.
    assert [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]] == [
        "digits-checkpoints"
    ]
