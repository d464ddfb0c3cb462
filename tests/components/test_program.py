"""The real __main__.py under Pulumi mocks, for both committed stacks and their variations.

Each run registers what `pulumi up` would ask the engine for; these tests assert the resources,
their properties and options, the stack outputs, and that every manifest is one the cluster (and
the training operator's webhook) would accept.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from pulumi.runtime.rpc import UNKNOWN

from tests.builders.k8s_rules import validate_manifest
from tests.components.conftest import (
    FIELD_MANAGER_ONLY,
    IMAGE,
    JOB,
    NETWORK_POLICY,
    PASSWORD,
    PROD_SECRETS,
    PVC,
    SECRET,
    pod_specs,
    replica_specs,
)
from tests.pulumi_harness import (
    REPO_ROOT,
    ProgramResult,
    RegisteredResource,
    Secret,
    contains_secret,
    registry_digest,
    run_program,
)

K8S_PROVIDER = "pulumi:providers:kubernetes"
DOCKER_PROVIDER = "pulumi:providers:docker"
COMPONENT = "pytorch-distributed:index:"
KUBERNETES_TYPES = (JOB, PVC, SECRET, NETWORK_POLICY)
PROVIDER_OF_PACKAGE = {"kubernetes": K8S_PROVIDER, "docker": DOCKER_PROVIDER}
REGISTRY_LOOKUP = "docker:index/getRegistryImage:getRegistryImage"
PREBUILT_REF = "registry.example.com/ml/pytorch-ddp-example@sha256:" + "c" * 64

Runner = Callable[..., ProgramResult]


def containers(result: ProgramResult) -> dict[str, dict[str, Any]]:
    found = {}
    for kind, pod in pod_specs(result).items():
        [container] = pod["containers"]
        found[kind] = container
    return found


def kubernetes_resources(result: ProgramResult) -> list[RegisteredResource]:
    return [resource for resource in result.resources if resource.type in KUBERNETES_TYPES]


def type_counts(result: ProgramResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for resource in result.resources:
        counts[resource.type] = counts.get(resource.type, 0) + 1
    return counts


def test_dev_registers_the_cpu_environment(dev: ProgramResult) -> None:
    assert type_counts(dev) == {
        COMPONENT + "TrainingEnvironment": 1,
        COMPONENT + "TrainingImage": 1,
        COMPONENT + "JobNetwork": 1,
        COMPONENT + "CheckpointVolume": 1,
        COMPONENT + "PyTorchJob": 1,
        K8S_PROVIDER: 1,
        DOCKER_PROVIDER: 1,
        IMAGE: 1,
        NETWORK_POLICY: 1,
        PVC: 1,
        JOB: 1,
    }


def test_prod_registers_the_tutorial_environment(prod: ProgramResult) -> None:
    assert type_counts(prod) == {
        COMPONENT + "TrainingEnvironment": 1,
        COMPONENT + "TrainingImage": 1,
        COMPONENT + "JobNetwork": 1,
        COMPONENT + "StackSecret": 1,
        COMPONENT + "CheckpointVolume": 1,
        COMPONENT + "PyTorchJob": 1,
        K8S_PROVIDER: 1,
        DOCKER_PROVIDER: 1,
        IMAGE: 1,
        NETWORK_POLICY: 1,
        SECRET: 1,
        PVC: 1,
        JOB: 1,
    }


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_component_tree_and_explicit_provider(
    stack: str, dev: ProgramResult, prod: ProgramResult
) -> None:
    result = {"dev": dev, "prod": prod}[stack]
    environment = result.one(COMPONENT + "TrainingEnvironment")
    assert environment.name == "training"
    for resource in result.resources:
        if resource is environment:
            continue
        assert resource.name.startswith("training-"), resource.name
        if resource.type.startswith(COMPONENT) or resource.type.startswith("pulumi:providers:"):
            assert resource.parent == environment.urn, resource.name
    kubernetes_provider = result.one(K8S_PROVIDER)
    assert kubernetes_provider.inputs["namespace"] == result.outputs["namespace"].value
    assert kubernetes_provider.inputs["enableServerSideApply"] in ("true", True)
    for resource in kubernetes_resources(result):
        component = result.by_urn(resource.parent)
        assert component.type.startswith(COMPONENT), resource.name
        assert resource.name.startswith(component.name + "-")
        assert resource.provider.startswith(kubernetes_provider.urn + "::"), resource.name
    assert result.one(IMAGE).provider.startswith(result.one(DOCKER_PROVIDER).urn + "::")


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"image": {"build": False, "ref": PREBUILT_REF, "repository": None}},
        {"checkpoints": {"existingClaim": "shared-ckpt"}},
    ],
    ids=["built", "prebuilt", "existing-claim"],
)
def test_every_resource_goes_through_an_explicit_provider(overrides: dict[str, Any]) -> None:
    """The children inherit the providers from TrainingEnvironment; none may fall back to a
    default provider (the engine would refuse it, the stack files disable them)."""
    result = run_program("prod", overrides=overrides, secrets=PROD_SECRETS)
    assert result.error is None
    managed = [
        resource
        for resource in result.resources
        if resource.custom and not resource.type.startswith("pulumi:providers:")
    ]
    assert {resource.type for resource in managed} >= {JOB, SECRET, NETWORK_POLICY}
    for resource in managed:
        provider = result.one(PROVIDER_OF_PACKAGE[resource.type.split(":", 1)[0]])
        assert resource.provider.startswith(provider.urn + "::"), resource.name


def test_dev_job(dev: ProgramResult) -> None:
    specs = replica_specs(dev)
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1
    # dev restarts in place, bounded by backoffLimit (the stack file says why).
    assert {spec["restartPolicy"] for spec in specs.values()} == {"OnFailure"}
    job = dev.one(JOB).inputs
    assert job["metadata"]["name"] == "ddp-dev"
    assert job["metadata"]["namespace"] == "default"
    assert job["spec"]["nprocPerNode"] == "1"
    assert job["spec"]["runPolicy"] == {"backoffLimit": 3, "cleanPodPolicy": "Running"}
    assert job["metadata"]["annotations"] == FIELD_MANAGER_ONLY  # waitFor: created
    # Every job's pods are tried against the namespace's admission before it is created.
    assert dev.one(JOB).hooks == {"before_create": ["training-job-pod-admission"]}
    for kind, container in containers(dev).items():
        assert container["name"] == "pytorch"
        assert "nvidia.com/gpu" not in container["resources"]["limits"], kind
        assert container["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
        args = container["args"]
        assert args[args.index("--batch_size") + 1 : args.index("--checkpoint-dir")] == [
            "32",
            "6",
            "2",
        ]
        assert args[args.index("--checkpoint-dir") + 1] == "/checkpoints/ddp-dev"
        assert args[args.index("--dataset-size") + 1] == "1024"
    for pod in pod_specs(dev).values():
        assert "imagePullSecrets" not in pod and "schedulerName" not in pod
        # ReadWriteOnce claim with two pods: they must share a node.
        terms = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms[0]["topologyKey"] == "kubernetes.io/hostname"


def test_prod_job(prod: ProgramResult) -> None:
    job = prod.one(JOB)
    specs = replica_specs(prod)
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1
    assert job.inputs["metadata"]["namespace"] == "runai-team-a"
    assert job.inputs["spec"]["nprocPerNode"] == "1"
    assert job.inputs["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 604800
    # waitFor: succeeded is the job's own hooks', not the provider's: no await annotation.
    assert job.inputs["metadata"]["annotations"] == FIELD_MANAGER_ONLY
    assert job.hooks == {
        "before_create": ["training-job-pod-admission"],
        "after_create": ["training-job-outcome"],
        "after_update": ["training-job-outcome"],
    }
    assert {spec["restartPolicy"] for spec in specs.values()} == {"ExitCode"}
    assert job.inputs["spec"]["runPolicy"]["activeDeadlineSeconds"] == 7 * 24 * 3600
    assert job.inputs["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    for labels in [
        job.inputs["metadata"]["labels"],
        *[spec["template"]["metadata"]["labels"] for spec in specs.values()],
    ]:
        assert labels["project"] == "team-a"
        assert labels["runai/queue"] == "team-a"
    for pod in pod_specs(prod).values():
        assert pod["schedulerName"] == "runai-scheduler"
        assert "affinity" not in pod  # ReadWriteMany: pods may spread over nodes
    for container in containers(prod).values():
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        args = container["args"]
        assert args[args.index("--batch_size") + 1 : args.index("--checkpoint-dir")] == [
            "32",
            "100",
            "25",
        ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_job_mounts_the_claim_and_runs_the_built_image(
    stack: str, dev: ProgramResult, prod: ProgramResult
) -> None:
    result = {"dev": dev, "prod": prod}[stack]
    claim_name = result.one(PVC).inputs["metadata"]["name"]
    assert claim_name == result.outputs["claimName"].value
    image = result.outputs["image"].value
    built = result.one(IMAGE).inputs["imageName"]
    assert image == built.rsplit(":", 1)[0] + "@" + registry_digest(built)
    for kind, pod in pod_specs(result).items():
        [container] = pod["containers"]
        assert container["image"] == image, kind
        mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        [claim_volume] = [v for v in volumes.values() if "persistentVolumeClaim" in v]
        assert claim_volume["persistentVolumeClaim"]["claimName"] == claim_name
        assert mounts[claim_volume["name"]] == "/checkpoints"
        [shm] = [name for name, path in mounts.items() if path == "/dev/shm"]
        assert volumes[shm]["emptyDir"]["medium"] == "Memory"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_built_image_is_pinned_to_the_digest_its_registry_serves(
    stack: str, dev: ProgramResult, prod: ProgramResult
) -> None:
    """The job runs the digest the registry answers for the pushed tag, looked up through the
    stack's docker provider, never the engine's `repoDigest` (podman's is the local manifest's)."""
    result = {"dev": dev, "prod": prod}[stack]
    image = result.one(IMAGE)
    [lookup] = [invoke for invoke in result.invokes if invoke.token == REGISTRY_LOOKUP]
    assert lookup.args == {"name": image.inputs["imageName"]}
    assert lookup.provider.startswith(result.one(DOCKER_PROVIDER).urn + "::")
    engine_digest = f"{image.inputs['imageName'].rsplit(':', 1)[0]}@sha256:"
    pinned = result.outputs["image"].value
    assert pinned.startswith(engine_digest)
    assert pinned.removeprefix(engine_digest) == registry_digest(lookup.args["name"])[7:]
    assert {c["image"] for c in containers(result).values()} == {pinned}


@pytest.mark.parametrize(
    ("stack", "overrides", "expected"),
    [
        ("dev", {}, [{"address": "http://localhost:5001", "authDisabled": True}]),
        ("dev", {"image": {"insecureRegistry": False}}, None),
        (
            "prod",
            {},
            [{"address": "registry.example.com", "username": "ml-robot", "password": PASSWORD}],
        ),
        (
            "prod",
            {"image": {"insecureRegistry": True}},
            [
                {
                    "address": "http://registry.example.com",
                    "username": "ml-robot",
                    "password": PASSWORD,
                }
            ],
        ),
    ],
    ids=["dev", "dev-https", "prod", "prod-plain-http"],
)
def test_docker_provider_has_the_registry_credentials_for_the_digest_lookup(
    stack: str, overrides: dict[str, Any], expected: list[dict[str, Any]] | None
) -> None:
    result = run_program(
        stack, overrides=overrides, secrets=PROD_SECRETS if stack == "prod" else None
    )
    assert result.error is None, result.error
    provider = result.one(DOCKER_PROVIDER)
    if expected is None:
        assert "registryAuth" not in provider.inputs
        return
    auth = provider.inputs["registryAuth"]
    # The provider's config reaches the engine as JSON; with a password in it, all of it secret.
    assert isinstance(auth, Secret) == (stack == "prod")
    assert json.loads(auth.value if isinstance(auth, Secret) else auth) == expected


@pytest.mark.parametrize(
    ("builder", "version"),
    [(None, "BuilderBuildKit"), ("buildkit", "BuilderBuildKit"), ("classic", "BuilderV1")],
)
def test_image_builder_setting_chooses_the_engines_builder(
    builder: str | None, version: str
) -> None:
    overrides = {"image": {"builder": builder}} if builder else {}
    result = run_program("dev", overrides=overrides)
    assert result.error is None, result.error
    assert result.one(IMAGE).inputs["build"]["builderVersion"] == version


def test_image_build_settings(dev: ProgramResult, prod: ProgramResult) -> None:
    dev_build = dev.one(IMAGE).inputs
    assert dev_build["build"]["context"] == "trainer"
    assert dev_build["build"]["dockerfile"] == "trainer/Dockerfile"
    assert dev_build["build"]["platform"] == "linux/amd64"
    assert dev_build["build"]["args"]["BASE_IMAGE"].startswith("pytorch/pytorch:")
    assert dev_build["skipPush"] is False
    assert "registry" not in dev_build
    prod_build = prod.one(IMAGE).inputs
    assert prod_build["build"]["args"] == {"BASE_IMAGE": "nvcr.io/nvidia/pytorch:24.07-py3"}
    assert prod_build["imageName"].startswith("registry.example.com/ml/pytorch-ddp-example:")
    registry = prod_build["registry"]
    assert registry["server"] == "registry.example.com"
    assert isinstance(registry["password"], Secret)
    assert registry["password"].value == PASSWORD


def test_password_never_appears_in_plain_text(prod: ProgramResult) -> None:
    encoded = base64.b64encode(PASSWORD.encode()).decode()
    for resource in prod.resources:
        for key, value in resource.inputs.items():
            if not contains_secret(value):
                text = json.dumps(value)
                assert PASSWORD not in text and encoded not in text, (resource.name, key)
    for name, output in prod.outputs.items():
        assert PASSWORD not in json.dumps(output.value), name


def test_stack_outputs(dev: ProgramResult, prod: ProgramResult) -> None:
    for result, namespace, job, stack in [
        (dev, "default", "ddp-dev", "dev"),
        (prod, "runai-team-a", "pytorch-ddp", "prod"),
    ]:
        outputs = result.outputs
        assert set(outputs) == {
            "namespace",
            "jobName",
            "image",
            "claimName",
            "checkpointPath",
            "logsCommand",
            "statusCommand",
            "checkpointCommand",
        }
        assert all(output.known and not output.secret for output in outputs.values())
        assert outputs["namespace"].value == namespace
        assert outputs["jobName"].value == job
        assert outputs["checkpointPath"].value == f"/checkpoints/{job}"
        assert outputs["logsCommand"].value == (
            f"kubectl --namespace {namespace} logs --follow pod/{job}-master-0"
        )
        assert f"pytorchjobs.kubeflow.org/{job}" in outputs["statusCommand"].value
        # Works after the job's pods are gone too (tools/retrieve.py).
        assert outputs["checkpointCommand"].value == f"make checkpoint STACK={stack}"


def test_kube_context_reaches_provider_and_commands() -> None:
    result = run_program("dev", overrides={"kubeContext": "kind-train"})
    assert result.error is None
    assert result.one(K8S_PROVIDER).inputs["context"] == "kind-train"
    assert result.outputs["logsCommand"].value.startswith("kubectl --context kind-train ")


def test_init_from_reaches_the_trainer_as_a_warm_start() -> None:
    result = run_program(
        "dev", overrides={"job": {"name": "ddp-dev-b64", "initFrom": "/checkpoints/ddp-dev"}}
    )
    assert result.error is None
    for container in containers(result).values():
        args = container["args"]
        assert args[args.index("--init-from") + 1] == "/checkpoints/ddp-dev"
        assert args[args.index("--checkpoint-dir") + 1] == "/checkpoints/ddp-dev-b64"


def test_init_from_the_jobs_own_directory_is_refused() -> None:
    result = run_program("dev", overrides={"job": {"initFrom": "/checkpoints/ddp-dev"}})
    assert result.error is not None and "job.initFrom" in str(result.error)


def test_single_node_gpu_job() -> None:
    result = run_program("dev", overrides={"job": {"nodes": 1, "gpusPerNode": 4, "cpu": "8"}})
    assert result.error is None
    assert set(replica_specs(result)) == {"Master"}
    job = result.one(JOB).inputs
    assert job["spec"]["nprocPerNode"] == "4"
    assert containers(result)["Master"]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert "affinity" not in pod_specs(result)["Master"]


def test_existing_claim_is_mounted_not_managed() -> None:
    result = run_program(
        "prod", overrides={"checkpoints": {"existingClaim": "shared-ckpt"}}, secrets=PROD_SECRETS
    )
    assert result.error is None
    assert result.of_type(PVC) == []
    assert result.outputs["claimName"].value == "shared-ckpt"
    for pod in pod_specs(result).values():
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert claims == ["shared-ckpt"]


def test_prebuilt_image_skips_docker() -> None:
    ref = "registry.example.com/ml/pytorch-ddp-example@sha256:" + "c" * 64
    result = run_program(
        "prod",
        overrides={"image": {"build": False, "ref": ref, "repository": None}},
        secrets=PROD_SECRETS,
    )
    assert result.error is None
    assert result.of_type(IMAGE) == [] and result.of_type(DOCKER_PROVIDER) == []
    assert result.outputs["image"].value == ref
    assert {c["image"] for c in containers(result).values()} == {ref}
    assert len(result.of_type(SECRET)) == 1  # pods still pull from the private registry
    assert not [message for level, message in result.logs if level == "WARNING"]


def test_tagged_prebuilt_image_is_allowed_with_a_warning() -> None:
    ref = "registry.example.com/ml/pytorch-ddp-example:24.07-py3"
    result = run_program(
        "dev", overrides={"image": {"build": False, "ref": ref, "repository": None}}
    )
    assert result.error is None
    assert result.outputs["image"].value == ref
    warnings = [message for level, message in result.logs if level == "WARNING"]
    assert any(ref in message and "digest" in message for message in warnings)


@pytest.mark.parametrize(
    ("wait_for", "annotations", "hooked"),
    [
        ("none", {"pulumi.com/skipAwait": "true"}, False),
        ("created", {}, False),
        ("running", {}, True),
        ("succeeded", {}, True),
    ],
)
def test_wait_for_annotations_and_hooks(
    wait_for: str, annotations: dict[str, str], hooked: bool
) -> None:
    """`running` and `succeeded` are waited for by the job's after-create and after-update
    hooks, never by the provider (no await annotation, no custom timeouts)."""
    result = run_program("dev", overrides={"job": {"waitFor": wait_for}})
    assert result.error is None
    job = result.one(JOB)
    assert job.inputs["metadata"]["annotations"] == {**FIELD_MANAGER_ONLY, **annotations}
    assert job.custom_timeouts == {}
    expected = ["training-job-outcome"] if hooked else []
    assert job.hooks.get("after_create", []) == expected
    assert job.hooks.get("after_update", []) == expected
    assert job.hooks["before_create"] == ["training-job-pod-admission"]
    assert set(job.hooks) <= {"before_create", "after_create", "after_update"}


def test_preview_with_unknown_image_digest() -> None:
    result = run_program("prod", secrets=PROD_SECRETS, preview=True)
    assert result.error is None
    assert result.outputs["image"].known is False
    # The pushed tag's digest is asked of the registry only after the push.
    assert [invoke for invoke in result.invokes if invoke.token == REGISTRY_LOOKUP] == []
    assert result.outputs["jobName"].value == "pytorch-ddp"
    assert {c["image"] for c in containers(result).values()} == {UNKNOWN}
    assert len(result.of_type(JOB)) == 1 and len(result.of_type(PVC)) == 1
    assert isinstance(result.one(SECRET).inputs["data"], Secret)


def _substitute_unknowns(value: Any) -> Any:
    if value == UNKNOWN:
        return "registry.example.com/unknown@sha256:" + "0" * 64
    if isinstance(value, dict):
        return {key: _substitute_unknowns(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute_unknowns(item) for item in value]
    return value


@pytest.mark.parametrize(
    ("stack", "preview", "overrides"),
    [
        ("dev", False, {}),
        ("prod", False, {}),
        ("prod", True, {}),
        (
            "dev",
            False,
            {"job": {"nodes": 1, "waitFor": "none"}, "checkpoints": {"storageClass": "standard"}},
        ),
    ],
    ids=["dev", "prod", "prod-preview", "dev-variant"],
)
def test_every_registered_manifest_validates(
    stack: str, preview: bool, overrides: dict[str, Any]
) -> None:
    secrets = PROD_SECRETS if stack == "prod" else None
    result = run_program(stack, overrides=overrides, secrets=secrets, preview=preview)
    assert result.error is None
    manifests = kubernetes_resources(result)
    assert {resource.type for resource in manifests} >= {JOB, PVC, NETWORK_POLICY}
    for resource in manifests:
        validate_manifest(_substitute_unknowns(resource.plain_inputs()))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stack_files_disable_default_providers_and_hold_no_secrets(stack: str) -> None:
    text = (REPO_ROOT / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8")
    config = yaml.safe_load(text)["config"]
    assert set(config["pulumi:disable-default-providers"]) >= {"kubernetes", "docker"}
    assert "pytorch-distributed:registryPassword" not in config
    assert "secure:" not in text
