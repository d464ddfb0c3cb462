"""Kubeflow Trainer v2 and JobSet on the control plane (cluster/control_plane.py), with their
admission webhooks served for real: `KubeflowTrainer`, a component the plane runs
(cluster/plane_component.py).

What their manifests install in a cluster, done on loopback: the CRDs (TrainJob, TrainingRuntime,
ClusterTrainingRuntime; JobSet), the `torch-distributed` ClusterTrainingRuntime, the two
controllers, and their webhook configurations. The webhooks need serving certificates: in a
cluster each controller's internal certificate rotator (or cert-manager) signs one for its
Service's DNS name and injects the CA into the configurations. Here the API server reaches each
webhook server at `https://127.0.0.1:<port>`, so this module signs a serving certificate for
127.0.0.1 with a CA of its own (openssl), writes it where each server reads it, turns the
rotators off (both controllers' documented `certManagement.enable: false` /
`internalCertManagement.enable: false`: "certificates must be provided externally"), and
installs the configurations of the modules' manifests with `clientConfig.url` and that CA in
place of the Service. Every TrainJob, TrainingRuntime, JobSet and JobSet pod therefore goes
through the real defaulting and validating webhooks (`failurePolicy: Fail`, as upstream).

Trainer reads its certificate from controller-runtime's default directory
(`$TMPDIR/k8s-webhook-server/serving-certs`; its configuration has no certDir), so it runs with
TMPDIR set to a directory of this plane's; JobSet's configuration has `webhook.certDir`.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from cluster.plane_component import Plane, PlaneComponent
from cluster.processes import http_ok
from machine.ports import free_port

TRAINER_GROUP = "trainer.kubeflow.org"
JOBSET_CRD = "jobsets.jobset.x-k8s.io"
TRAINER_CRDS = (
    "trainjobs.trainer.kubeflow.org",
    "trainingruntimes.trainer.kubeflow.org",
    "clustertrainingruntimes.trainer.kubeflow.org",
)
TORCH_RUNTIME = "torch-distributed"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def serving_certificate(directory: Path) -> tuple[Path, Path, bytes]:
    """A CA and a serving certificate for 127.0.0.1 signed by it: (cert, key, CA PEM)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "tls.key", directory / "tls.csr", directory / "tls.crt"
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
        *("-keyout", str(ca_key), "-out", str(ca_cert), "-subj", "/CN=e2e-webhook-ca"),
    )
    _openssl(
        *("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr)),
        *("-subj", "/CN=127.0.0.1"),
    )
    extensions = directory / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl(
        *("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key)),
        *("-CAcreateserial", "-days", "2", "-out", str(cert), "-extfile", str(extensions)),
    )
    return cert, key, ca_cert.read_bytes()


def install_cert(cert: Path, key: Path, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert.read_bytes())
    (directory / "tls.key").write_bytes(key.read_bytes())


def webhook_configurations(
    manifests: Path, port: int, ca: bytes, *, prefix: str, patches: Sequence[Path] = ()
) -> list[dict[str, Any]]:
    """The module's webhook configurations, named `<prefix>-<name>`, each webhook's Service
    replaced by `https://127.0.0.1:<port><its path>` and the CA; `patches` are kustomize JSON
    patches (`op: replace, path: /webhooks/<i>`) applied to the configuration of their kind."""
    import base64

    documents = [d for d in yaml.safe_load_all(manifests.read_text()) if d]
    for patch_file in patches:
        for op in yaml.safe_load(patch_file.read_text()):
            index = int(op["path"].rsplit("/", 1)[1])
            kind = (
                "MutatingWebhookConfiguration"
                if op["value"]["name"].startswith("m")
                else "ValidatingWebhookConfiguration"
            )
            for document in documents:
                if document["kind"] == kind:
                    document["webhooks"][index] = copy.deepcopy(op["value"])
    bundle = base64.b64encode(ca).decode()
    for document in documents:
        document["metadata"]["name"] = f"{prefix}-{document['metadata']['name']}"
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
    return documents


def wait_established(plane: Plane, names: tuple[str, ...]) -> None:
    from kubernetes import client

    extensions = client.ApiextensionsV1Api(plane.api())

    def ready() -> bool:
        for name in names:
            conditions = extensions.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return False
        return True

    plane.poll(f"the CRDs {', '.join(names)} to be established", ready)


def apply_webhooks(plane: Plane, documents: list[dict[str, Any]]) -> None:
    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(plane.api())
    for document in documents:
        if document["kind"] == "MutatingWebhookConfiguration":
            admission.create_mutating_webhook_configuration(document)
        else:
            admission.create_validating_webhook_configuration(document)


class KubeflowTrainer(PlaneComponent):
    """Kubeflow Trainer v2 and JobSet, a component of every control plane (its start)."""

    name = "Kubeflow Trainer and JobSet"

    def start(self, plane: Plane) -> None:
        """JobSet, then Trainer (which builds JobSets), each with its CRDs, webhooks and a readiness
        wait; then the torch-distributed ClusterTrainingRuntime, through Trainer's webhook."""
        from kubernetes import utils

        share = plane.bin_dir.parent
        api = plane.api()
        for crd in sorted((share / "jobset-crds").glob("*.yaml")):
            utils.create_from_yaml(api, str(crd))
        for crd in sorted((share / "trainer-crds").glob("*.yaml")):
            utils.create_from_yaml(api, str(crd))
        wait_established(plane, (JOBSET_CRD, *TRAINER_CRDS))
        cert, key, ca = serving_certificate(plane.workdir / "webhook-pki")

        # JobSet
        jobset_port, jobset_probe = free_port(), free_port()
        jobset_certs = plane.workdir / "jobset-certs"
        install_cert(cert, key, jobset_certs)
        jobset_config = plane.workdir / "jobset-config.yaml"
        jobset_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {
                        "port": jobset_port,
                        "host": "127.0.0.1",
                        "certDir": str(jobset_certs),
                    },
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{jobset_probe}"},
                    "metrics": {"bindAddress": "0"},
                }
            )
        )
        process = plane.start_process(
            "jobset",
            [
                f"--kubeconfig={plane.kubeconfig}",
                f"--config={jobset_config}",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{jobset_probe}",
            ],
        )
        plane.wait_ready(
            process, "/readyz", lambda: http_ok(f"http://127.0.0.1:{jobset_probe}/readyz")
        )
        webhooks = share / "jobset-webhooks"
        apply_webhooks(
            plane,
            webhook_configurations(
                webhooks / "manifests.yaml",
                jobset_port,
                ca,
                prefix="jobset",
                patches=sorted(webhooks.glob("*-patch.yaml")),
            ),
        )

        # Trainer
        trainer_port, trainer_probe = free_port(), free_port()
        tmpdir = plane.workdir / "trainer-tmp"
        install_cert(cert, key, tmpdir / "k8s-webhook-server" / "serving-certs")
        trainer_config = plane.workdir / "trainer-config.yaml"
        trainer_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "certManagement": {"enable": False},
                    "webhook": {"port": trainer_port, "host": "127.0.0.1"},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{trainer_probe}"},
                    "metrics": {"bindAddress": "0"},
                    "statusServer": {"port": free_port()},
                }
            )
        )
        process = plane.start_process(
            "trainer-controller-manager",
            [f"--kubeconfig={plane.kubeconfig}", f"--config={trainer_config}"],
            env={"TMPDIR": str(tmpdir)},
        )
        plane.wait_ready(
            process, "/readyz", lambda: http_ok(f"http://127.0.0.1:{trainer_probe}/readyz")
        )
        apply_webhooks(
            plane,
            webhook_configurations(
                share / "trainer-webhooks" / "manifests.yaml", trainer_port, ca, prefix="trainer"
            ),
        )
        # The runtime goes through the validating webhook just registered; the API server may take
        # a moment to see the configuration, so retry until it is admitted.
        runtime = share / "trainer-runtimes" / "torch_distributed.yaml"
        plane.poll(
            f"the {TORCH_RUNTIME} ClusterTrainingRuntime to be admitted",
            lambda: _create_runtime(plane, runtime),
        )


def _create_runtime(plane: Plane, path: Path) -> bool:
    from kubernetes import client
    from kubernetes.client import ApiException

    body = yaml.safe_load(path.read_text())
    try:
        client.CustomObjectsApi(plane.api()).create_cluster_custom_object(
            TRAINER_GROUP, "v1alpha1", "clustertrainingruntimes", body
        )
    except ApiException as error:
        if error.status != 409:  # created by an earlier try
            raise
    return True
