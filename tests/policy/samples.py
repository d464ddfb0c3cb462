"""Hand-written compliant resources in the shapes pulumi-kubernetes registers, for rule tests.

Written independently of builders/manifests.py on purpose: the rules are checked against the
Kubernetes/Kubeflow shapes themselves here, and against the real program in
test_program_passes.py. Each builder returns a fresh dict that a test mutates into a violation.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from policy.rules.model import (
    DOCKERCONFIGJSON,
    PVC_TYPE,
    PYTORCHJOB_TYPE,
    RETAIN_ANNOTATION,
    SECRET_TYPE,
    Resource,
)

DIGEST_IMAGE = "registry.example.com/ml/trainer@sha256:" + "ab" * 32
NAMESPACE = "runai-team-a"


def pod_security() -> dict[str, Any]:
    """Pod Security "restricted" at pod level, with a numeric user and group."""
    return {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """What "restricted" asks of each container."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def container(*, gpus: int = 1, image: str = DIGEST_IMAGE) -> dict[str, Any]:
    limits: dict[str, str] = {"memory": "16Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    return {
        "name": "pytorch",
        "image": image,
        "command": ["/opt/pytorch-distributed/trainer/entrypoint.sh"],
        "args": ["--max-restarts", "0", "--", "--batch_size", "32", "100", "25"],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": limits},
        "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
        "securityContext": container_security(),
    }


def replica(*, replicas: int, gpus: int = 1, claim: str = "ddp-checkpoints") -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": "OnFailure",
        "template": {
            "spec": {
                "schedulerName": "runai-scheduler",
                "containers": [container(gpus=gpus)],
                "imagePullSecrets": [{"name": "ddp-registry"}],
                "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}}],
                "securityContext": pod_security(),
                "automountServiceAccountToken": False,
            }
        },
    }


def pytorchjob(*, workers: int = 1, gpus: int = 1) -> dict[str, Any]:
    specs = {"Master": replica(replicas=1, gpus=gpus)}
    if workers:
        specs["Worker"] = replica(replicas=workers, gpus=gpus)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        # As the program labels a Run:ai job: its project and the project's queue.
        "metadata": {
            "name": "ddp",
            "namespace": NAMESPACE,
            "labels": {"project": "team-a", "runai/queue": "team-a"},
        },
        "spec": {
            "nprocPerNode": str(max(gpus, 1)),
            "runPolicy": {
                "backoffLimit": 3,
                "activeDeadlineSeconds": 86400,
                "ttlSecondsAfterFinished": 3600,
            },
            "pytorchReplicaSpecs": specs,
        },
    }


def trainjob(*, nodes: int = 2, gpus: int = 1, image: str = DIGEST_IMAGE) -> dict[str, Any]:
    limits: dict[str, str] = {"memory": "16Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    pod = {
        "volumes": [
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ddp-checkpoints"}}
        ],
        "containers": [
            {
                "name": "node",
                "volumeMounts": [{"name": "checkpoints", "mountPath": "/c"}],
                "securityContext": container_security(),
            }
        ],
        "securityContext": pod_security(),
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "ddp", "namespace": NAMESPACE},
        "spec": {
            "runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "image": image,
                "command": ["/opt/pytorch-distributed/trainer/entrypoint.sh"],
                "args": ["--", "100", "25"],
                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                "numNodes": nodes,
                "numProcPerNode": max(gpus, 1),
                "resourcesPerNode": {
                    "requests": {"cpu": "4", "memory": "16Gi"},
                    "limits": limits,
                },
            },
            "runtimePatches": [
                {
                    "manager": "pytorch-distributed/pulumi",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {"spec": {"template": {"spec": pod}}},
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
            "activeDeadlineSeconds": 86400,
        },
    }


def trainingruntime() -> dict[str, Any]:
    """The TrainingRuntime a TrainJob runs on, its `node` pods without a service account token."""
    pod = {"automountServiceAccountToken": False, "containers": [{"name": "node"}]}
    node = {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "ddp-runtime", "namespace": NAMESPACE},
        "spec": {"mlPolicy": {"torch": {}}, "template": {"spec": {"replicatedJobs": [node]}}},
    }


def claim(*, access_mode: str = "ReadWriteMany", retained: bool = True) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "ddp-checkpoints", "namespace": NAMESPACE}
    if retained:
        metadata["annotations"] = {RETAIN_ANNOTATION: "true"}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": {"accessModes": [access_mode], "resources": {"requests": {"storage": "10Ti"}}},
    }


def docker_config(server: str = "registry.example.com") -> str:
    auth = base64.b64encode(b"robot:s3cret-value").decode()
    return json.dumps({"auths": {server: {"username": "robot", "auth": auth}}})


def registry_secret(*, secret_type: str = DOCKERCONFIGJSON) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "ddp-registry", "namespace": NAMESPACE},
        "type": secret_type,
        "data": {".dockerconfigjson": base64.b64encode(docker_config().encode()).decode()},
    }


def stack(
    job: dict[str, Any] | None = None,
    pvc: dict[str, Any] | None = None,
    secret: dict[str, Any] | None = None,
    *,
    protect_claim: bool = False,
) -> list[Resource]:
    """A stack of job + claim + secret, as the stack policies receive it."""
    return [
        Resource(PYTORCHJOB_TYPE, "job", pytorchjob() if job is None else job, "urn:job"),
        Resource(PVC_TYPE, "claim", claim() if pvc is None else pvc, "urn:claim", protect_claim),
        Resource(SECRET_TYPE, "secret", registry_secret() if secret is None else secret, "urn:sec"),
    ]
