"""Kueue on the control plane (cluster/control_plane.py), with its admission webhooks served for
real (`Kueue`, a component the plane runs: cluster/plane_component.py), and the queue objects
(ResourceFlavor, ClusterQueue, LocalQueue) a cluster administrator creates.

What Kueue's manifests install, done on loopback as for Trainer (cluster/trainer_plane.py):
its CRDs, its controller manager with the PyTorchJob and TrainJob integrations and
`waitForPodsReady` (all-or-nothing admission: a job's pods must all be ready before the next job
is admitted, and a job whose pods are not within the timeout is evicted and queued again), and
the webhook configurations it serves: its own objects' and the two jobs' (the mutating one
suspends a job that names a LocalQueue when it is created, so Kueue decides when it starts).
The webhooks of integrations it does not run here (Pods, Deployments, batch Jobs, Ray, ...) are
left out, as a cluster without those integrations registers none of them.

Certificates: the internal rotator is off (`internalCertManagement.enable: false`), so the webhook
serving certificate is this plane's (127.0.0.1, `webhook.certDir`), and the metrics server's,
which Kueue then reads from the fixed /etc/kueue/metrics/certs (a pod's mounted Secret), is bound
there in a mount namespace of Kueue's own (as root, which creates that empty directory once;
without root Kueue does not run here). The
visibility API server (an aggregated API, feature gate VisibilityOnDemand) is off: nothing here
registers its APIService.

scripts/e2e-tools.sh builds Kueue in one module graph with Trainer (so it compiles in the Trainer
API the plane runs); ControlPlane.add_kueue starts it on a running plane: `make cluster` before it
says the cluster is ready, the e2e suite when its first module that queues starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cluster.plane_component import Plane, PlaneComponent
from cluster.processes import http_ok
from cluster.trainer_plane import (
    apply_webhooks,
    install_cert,
    serving_certificate,
    wait_established,
    webhook_configurations,
)
from machine.ports import free_port
from readers.conditions import is_true
from readers.queue_state import KUEUE_GROUP, KUEUE_VERSION, LOCAL_QUEUE_PLURAL

KUEUE_NAMESPACE = "kueue-system"
KUEUE_CRDS = (
    "workloads.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "localqueues.kueue.x-k8s.io",
    "resourceflavors.kueue.x-k8s.io",
    "workloadpriorityclasses.kueue.x-k8s.io",
)
INTEGRATIONS = ("kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob")
# The webhook paths this plane registers: Kueue's own objects' and its integrations' jobs'.
WEBHOOK_PATH_PARTS = ("-kueue-x-k8s-io-", "-pytorchjob", "-trainjob")
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# A pod that is not ready this long after its job's admission gets the job evicted (and queued
# again): long enough for a real node's first pull of the trainer image.
PODS_READY_TIMEOUT = "10m"
# The flavor every ClusterQueue of this plane assigns: one kind of node.
FLAVOR = "default-flavor"


def kueue_configuration(port: int, probe: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration for this plane (config.kueue.x-k8s.io/v1beta2)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
        "metrics": {"bindAddress": "0"},
        "manageJobsWithoutQueueName": False,
        "waitForPodsReady": {
            "timeout": PODS_READY_TIMEOUT,
            "blockAdmission": True,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 10},
        },
        "integrations": {"frameworks": list(INTEGRATIONS)},
        "featureGates": {"VisibilityOnDemand": False},
    }


class Kueue(PlaneComponent):
    """Kueue, a component of the plane that `ControlPlane.add_kueue` starts."""

    name = "Kueue"

    def start(self, plane: Plane) -> None:
        """Kueue (the plane's tool set: bin/kueue, its manifests beside bin/) with its CRDs and
        webhooks, and the ResourceFlavor every ClusterQueue here uses."""
        from kubernetes import client, utils

        if not plane.private_mounts:
            raise RuntimeError(
                "Kueue runs on this control plane only as root (util-linux's unshare gives it the "
                f"mount namespace that binds its certificates at {METRICS_CERT_DIR})"
            )
        share = plane.bin_dir.parent
        api = plane.api()
        for crd in sorted((share / "kueue-crds").glob("*.yaml")):
            utils.create_from_yaml(api, str(crd))
        client.CoreV1Api(api).create_namespace({"metadata": {"name": KUEUE_NAMESPACE}})
        wait_established(plane, KUEUE_CRDS)
        cert, key, ca = serving_certificate(plane.workdir / "kueue-pki")
        certs = plane.workdir / "kueue-certs"
        install_cert(cert, key, certs)
        port, probe = free_port(), free_port()
        config = plane.workdir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(kueue_configuration(port, probe, certs)))
        process = plane.start_process(
            "kueue",
            [f"--config={config}"],
            command=[str(plane.bin_dir / "kueue")],
            env={"KUBECONFIG": str(plane.kubeconfig)},
            wrapper=plane.private_dir_wrapper(METRICS_CERT_DIR, certs),
        )
        plane.wait_ready(process, "/readyz", lambda: http_ok(f"http://127.0.0.1:{probe}/readyz"))
        documents = webhook_configurations(
            share / "kueue-webhooks" / "manifests.yaml", port, ca, prefix="kueue"
        )
        for document in documents:
            document["webhooks"] = [
                webhook
                for webhook in document["webhooks"]
                if any(part in webhook["clientConfig"]["url"] for part in WEBHOOK_PATH_PARTS)
            ]
        apply_webhooks(plane, documents)
        # The flavor goes through Kueue's webhook just registered: retry until it is admitted.
        plane.poll(
            f"the ResourceFlavor {FLAVOR} to be admitted",
            lambda: create_queue_object(api, resource_flavor(FLAVOR)),
        )


# -- the objects a cluster administrator creates -------------------------------------------------


def resource_flavor(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
    }


def cluster_queue(
    name: str, quota: Mapping[str, str], *, preempt_lower_priority: bool = True
) -> dict[str, Any]:
    """A ClusterQueue open to every namespace, with `quota` (resource -> nominal quota) of the
    plane's flavor; it preempts lower-priority workloads of its own to admit a higher one."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "preemption": {
                "withinClusterQueue": "LowerPriority" if preempt_lower_priority else "Never"
            },
            "resourceGroups": [
                {
                    "coveredResources": sorted(quota),
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [
                                {"name": resource, "nominalQuota": quota[resource]}
                                for resource in sorted(quota)
                            ],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(
    namespace: str, name: str, cluster_queue_name: str, *, stop_policy: str = "None"
) -> dict[str, Any]:
    """A LocalQueue; `stop_policy` "Hold" admits none of its jobs until it is set to "None"."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name, "stopPolicy": stop_policy},
    }


def workload_priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}


def create_queue_object(api: Any, body: Mapping[str, Any]) -> bool:
    """Create a Kueue object (cluster-scoped, or namespaced when it has a namespace); one that
    exists already is left as it is. True, for a poll."""
    from kubernetes import client
    from kubernetes.client import ApiException

    custom = client.CustomObjectsApi(api)
    plural = PLURALS[str(body["kind"])]
    namespace = (body.get("metadata") or {}).get("namespace")
    try:
        if namespace:
            custom.create_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, plural, dict(body)
            )
        else:
            custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, dict(body))
    except ApiException as error:
        if error.status != 409:
            raise
    return True


# The one-machine cluster's queue (`make cluster`): `job.queue: local` on Pulumi.local.yaml's
# namespace.
NODE_QUEUE = "local"
QUEUED_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")


def create_node_queue(plane: Plane, namespace: str) -> None:
    """A ClusterQueue `local` whose quota is what the cluster's nodes can hold (their summed
    allocatable CPU, memory and GPUs), and the LocalQueue `local` in `namespace` that sends jobs
    to it: on one machine, the queue admits what fits and holds back the rest. Returns once Kueue
    says the LocalQueue is active."""
    from kubernetes import client
    from kubernetes.utils import parse_quantity

    api = plane.api()
    totals: dict[str, Any] = {}
    for node in client.CoreV1Api(api).list_node().items:
        allocatable = node.status.allocatable or {}
        for resource in QUEUED_RESOURCES:
            if resource in allocatable:
                totals[resource] = totals.get(resource, 0) + parse_quantity(allocatable[resource])
    quota = {resource: str(int(amount)) for resource, amount in totals.items()}
    create_queue_object(api, cluster_queue(NODE_QUEUE, quota))
    create_queue_object(api, local_queue(namespace, NODE_QUEUE, NODE_QUEUE))
    plane.poll(
        f"Kueue to make the LocalQueue {NODE_QUEUE} active",
        lambda: node_queue_active(api, namespace),
    )


def node_queue_active(api: Any, namespace: str) -> bool:
    """Whether the LocalQueue `local` in `namespace` is active: Kueue runs, and it and its
    ClusterQueue exist (Kueue's condition Active)."""
    from kubernetes import client

    queue = client.CustomObjectsApi(api).get_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, namespace, LOCAL_QUEUE_PLURAL, NODE_QUEUE
    )
    return is_true(queue, "Active")
