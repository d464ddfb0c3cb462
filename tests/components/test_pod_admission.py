"""components/pod_admission.py: which pods the check tries against the namespace, and what an
admission refusal, an RBAC refusal and an API server that cannot answer each make of `pulumi up`.
The dry run on a real API server whose namespace enforces Pod Security "restricted" is
tests/e2e/test_real_node.py's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiException
from urllib3.exceptions import MaxRetryError

from builders.job_apis import api_of_settings
from builders.manifests import pod_security_context
from components.pod_admission import PodAdmission, PodAdmissionError, whole_numbers
from settings.stack import StackSettings, load_stack_file, parse_settings
from tests.conftest import REPO_ROOT

IMAGE = "registry.example.com/ml/trainer@sha256:" + "c" * 64
POD_SECURITY_REFUSAL = (
    'pods "ddp-dev-master-0-admission-x2b9q" is forbidden: violates PodSecurity '
    '"restricted:latest": runAsNonRoot != true (pod must not set securityContext.runAsNonRoot='
    "false), runAsUser=0 (pod must not set runAsUser=0)"
)


def admission_of(settings: StackSettings) -> tuple[PodAdmission, dict[str, Any]]:
    api = api_of_settings(settings)
    job = api.job_manifest(settings, image=IMAGE)
    admission = PodAdmission(
        namespace=settings.namespace,
        name=settings.job.name,
        kind=job["kind"],
        kube_context=None,
        runtime=api.runtime_manifest(settings),
    )
    return admission, job


def refusal(status: int, message: str) -> ApiException:
    error = ApiException(status=status, reason="Forbidden" if status == 403 else "Error")
    error.body = json.dumps({"kind": "Status", "status": "Failure", "message": message})
    return error


class Server:
    """Dry-run creates, answered with `error` (or admitted), each pod recorded."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.created: list[dict[str, Any]] = []

    def __call__(self, pod: dict[str, Any]) -> None:
        self.created.append(pod)
        if self.error is not None:
            raise self.error


def test_a_pytorchjobs_master_and_workers_are_one_pod_to_try() -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    admission, job = admission_of(settings)
    (probe,) = admission.probe_pods(job)
    assert probe["kind"] == "Pod"
    # generateName: a pod of the job's own names may still be there (a replacement).
    assert probe["metadata"]["generateName"] == "ddp-dev-master-0-admission-"
    assert "name" not in probe["metadata"]
    assert probe["metadata"]["namespace"] == "default"
    assert probe["spec"] == job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def test_a_trainjobs_pods_are_tried_as_jobset_makes_them_from_the_runtime_and_patch() -> None:
    settings = load_stack_file("trainjob", REPO_ROOT)
    admission, job = admission_of(settings)
    (probe,) = admission.probe_pods(job)
    spec = probe["spec"]
    assert spec["securityContext"] == pod_security_context(settings)  # the patch's
    assert spec["automountServiceAccountToken"] is False  # the runtime's
    assert spec["containers"][0]["image"] == IMAGE  # the trainer's


def test_admitted_pods_let_the_create_go_on_in_silence() -> None:
    admission, job = admission_of(load_stack_file("dev", REPO_ROOT))
    server, said = Server(), []
    admission.check(job, server, said.append)
    assert len(server.created) == 1 and said == []


def test_a_policy_webhooks_refusal_stops_the_create_too() -> None:
    admission, job = admission_of(load_stack_file("dev", REPO_ROOT))
    denied = refusal(
        400,
        'admission webhook "validate.kyverno.svc-fail" denied the request: resource Pod/default/'
        "x was blocked due to the following policies: require-labels",
    )
    with pytest.raises(PodAdmissionError, match=r"denied the request: resource Pod/default/x"):
        admission.check(job, Server(denied), [].append)


def test_a_refusal_by_admission_stops_the_create_with_the_api_servers_reason() -> None:
    values = {"image": {"build": False, "ref": IMAGE}, "job": {"name": "ddp", "runAsRoot": True}}
    admission, job = admission_of(parse_settings(values))
    (probe,) = admission.probe_pods(job)
    assert probe["spec"]["securityContext"]["runAsUser"] == 0
    with pytest.raises(PodAdmissionError) as raised:
        admission.check(job, Server(refusal(403, POD_SECURITY_REFUSAL)), [].append)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        "PyTorchJob default/ddp: the namespace refuses its pods, so the job was not created: "
        'pods "ddp-dev-master-0-admission-x2b9q" is forbidden: violates PodSecurity'
    )
    assert message.endswith("(the pods' user comes from job.securityContext and job.runAsRoot)")


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (
            refusal(
                403,
                'pods is forbidden: User "ci" cannot create resource "pods" in API group "" in '
                'the namespace "default"',
            ),
            '(403: pods is forbidden: User "ci" cannot create resource "pods"',
        ),
        (
            refusal(
                403,
                'pods "x" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=1, '
                "used: nvidia.com/gpu=8, limited: nvidia.com/gpu=8",
            ),
            '(403: pods "x" is forbidden: exceeded quota: gpu',
        ),
        (refusal(500, "etcdserver: request timed out"), "(500: etcdserver: request timed out)"),
        (MaxRetryError(None, "/api/v1"), "(MaxRetryError: "),  # type: ignore[arg-type]
    ],
    ids=["rbac", "quota", "server-error", "unreachable"],
)
def test_a_check_that_cannot_be_made_is_said_and_the_create_goes_on(
    error: BaseException, why: str
) -> None:
    admission, job = admission_of(load_stack_file("trainjob", REPO_ROOT))
    said: list[str] = []
    admission.check(job, Server(error), said.append)
    (line,) = said
    assert line.startswith(
        "TrainJob default/ddp-trainjob: could not ask the API server whether the namespace "
        "admits the job's pods "
    )
    assert why in line and line.endswith("creating it unchecked")


def test_a_job_whose_pods_cannot_be_told_is_created_unchecked() -> None:
    admission, job = admission_of(load_stack_file("dev", REPO_ROOT))
    server, said = Server(), []
    admission.check({**job, "spec": {}}, server, said.append)
    assert server.created == []
    assert said == [
        "PyTorchJob default/ddp-dev: cannot tell its pods (spec.pytorchReplicaSpecs is missing "
        "or empty); creating it unchecked"
    ]


def test_the_engines_float_numbers_become_the_manifests_whole_numbers_again() -> None:
    """A hook gets the job's inputs through a protobuf Struct, every number a float; the
    Kubernetes client refuses `runAsUser: 10001.0` before any request (the real engine showed
    it: the first e2e `up` after the hook landed failed on exactly that)."""
    from google.protobuf import json_format, struct_pb2

    _, job = admission_of(load_stack_file("dev", REPO_ROOT))
    struct = struct_pb2.Struct()
    struct.update(job)
    as_the_engine_passes_it = json_format.MessageToDict(struct)
    assert '"runAsUser": 10001.0' in json.dumps(as_the_engine_passes_it)

    restored = whole_numbers(as_the_engine_passes_it)

    assert json.dumps(restored, sort_keys=True) == json.dumps(job, sort_keys=True)
