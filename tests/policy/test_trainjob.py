"""The pack's rules on a TrainJob (policy/rules/jobs/trainjob.py): the program's TrainJob stacks
pass through the running pack, and the dangers the rules exist for are caught on a TrainJob as on
a PyTorchJob: an unprotected or single-node claim, a tagged image, GPUs that do not match the
processes, a literal credential, a TrainJob on Run:ai, and what Trainer itself would refuse."""

from __future__ import annotations

from typing import Any

import pytest

from policy.rules.checkpoint import checkpoint_claim_protection
from policy.rules.credentials import no_plaintext_credentials
from policy.rules.gpu import gpu_requests_match_nproc
from policy.rules.image import image_pinned_by_digest
from policy.rules.jobs.trainjob import trainjob_shape
from policy.rules.lifecycle import job_active_deadline
from policy.rules.model import PVC_TYPE, TRAINJOB_TYPE, Resource
from policy.rules.scheduler import runai_scheduler
from tests.policy.pack_client import Stub
from tests.policy.samples import claim, trainjob
from tests.policy.test_pack import ADVISORY_POLICIES
from tests.policy.test_program_passes import diagnostics, mandatory, policy_config
from tests.pulumi_harness import run_program

TRAINJOB_PROD = {"platform": "kubeflow", "runaiProject": None, "job": {"api": "trainjob"}}


def test_a_compliant_trainjob_passes_every_resource_rule() -> None:
    job = trainjob()
    assert image_pinned_by_digest(TRAINJOB_TYPE, job) == []
    assert gpu_requests_match_nproc(TRAINJOB_TYPE, job) == []
    assert trainjob_shape(TRAINJOB_TYPE, job) == []
    assert no_plaintext_credentials(TRAINJOB_TYPE, job) == []
    assert job_active_deadline(TRAINJOB_TYPE, job) == []
    assert runai_scheduler(TRAINJOB_TYPE, job, {"platform": "kubeflow"}) == []


def test_a_tagged_trainer_image_is_named_at_its_field() -> None:
    messages = image_pinned_by_digest(TRAINJOB_TYPE, trainjob(image="team/trainer:v3"))
    assert messages == [
        "spec.trainer.image 'team/trainer:v3' is a bare tag; pin it by digest "
        "(name@sha256:<64 hex>)"
    ]


def test_gpus_per_node_must_match_num_proc_per_node() -> None:
    job = trainjob(gpus=2)
    job["spec"]["trainer"]["numProcPerNode"] = 1
    assert gpu_requests_match_nproc(TRAINJOB_TYPE, job) == [
        "spec.trainer.resourcesPerNode.limits['nvidia.com/gpu'] is '2' but "
        "spec.trainer.numProcPerNode is 1; each pod must get one GPU per process"
    ]
    del job["spec"]["trainer"]["resourcesPerNode"]["limits"]["memory"]
    assert "spec.trainer.resourcesPerNode.limits.memory is missing" in gpu_requests_match_nproc(
        TRAINJOB_TYPE, job
    )


def test_a_multi_node_trainjob_on_a_single_node_unretained_claim_is_stopped() -> None:
    resources = [
        Resource(TRAINJOB_TYPE, "job", trainjob(nodes=2), "urn:job"),
        Resource(PVC_TYPE, "claim", claim(access_mode="ReadWriteOnce", retained=False), "urn:c"),
    ]
    messages = [v.message for v in checkpoint_claim_protection(resources, {})]
    assert len(messages) == 2
    assert "mounted by the 2 pods of TrainJob 'ddp'" in messages[0]
    assert (
        "checkpoint claim 'ddp-checkpoints' of TrainJob 'ddp' is neither protected" in (messages[1])
    )


def test_a_literal_credential_in_the_trainers_env_is_stopped() -> None:
    job = trainjob()
    job["spec"]["trainer"]["env"].append({"name": "HF_TOKEN", "value": "abc123"})
    assert (
        "spec.trainer.env[1] (HF_TOKEN) has a plain value but its name says it is a credential; "
        "use valueFrom.secretKeyRef (the stack's job.secretEnv.HF_TOKEN, not job.env)"
        in no_plaintext_credentials(TRAINJOB_TYPE, job)
    )


def test_a_trainjob_on_runai_is_refused() -> None:
    (message,) = runai_scheduler(TRAINJOB_TYPE, trainjob(), {"platform": "runai"})
    assert message.startswith("a TrainJob on a Run:ai stack: Run:ai schedules PyTorchJob")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda job: job["spec"]["trainer"]["env"].append({"name": "PET_NNODES", "value": "9"}),
            "spec.trainer.env sets PET_NNODES, which the torch plugin sets itself",
        ),
        (
            lambda job: job["spec"]["runtimeRef"].pop("name"),
            "spec.runtimeRef.name is missing",
        ),
        (
            lambda job: job["spec"]["trainer"].update(numNodes=0),
            "spec.trainer.numNodes is 0; at least 1 node trains",
        ),
        (
            lambda job: job["spec"]["runtimePatches"][0].update(manager="pytorch-distributed"),
            "spec.runtimePatches[0].manager 'pytorch-distributed' is not a domain-prefixed path",
        ),
        (
            lambda job: job["metadata"].update(name="2fast"),
            "metadata.name '2fast' is not a DNS-1035 label",
        ),
        (
            lambda job: job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
                "replicatedJobs"
            ][0].update(name="launcher"),
            "patches no replicated job named 'node'",
        ),
    ],
)
def test_what_trainer_would_refuse_is_stopped_before_it(change: Any, message: str) -> None:
    job = trainjob()
    change(job)
    assert any(message in m for m in trainjob_shape(TRAINJOB_TYPE, job)), trainjob_shape(
        TRAINJOB_TYPE, job
    )


def test_the_dev_trainjob_program_passes_the_pack(analyzer: Stub) -> None:
    result = run_program("trainjob")
    assert result.error is None, result.error
    assert TRAINJOB_TYPE in {r.type for r in result.resources}
    found = diagnostics(analyzer, result, policy_config("trainjob"))
    assert mandatory(found) == []
    assert {d.policyName for d in found} <= ADVISORY_POLICIES


def test_the_prod_program_as_a_trainjob_passes_off_runai_and_is_refused_on_it(
    analyzer: Stub,
) -> None:
    result = run_program("prod", overrides=TRAINJOB_PROD, secrets={"registryPassword": "x"})
    assert result.error is None, result.error
    assert mandatory(diagnostics(analyzer, result, {})) == []
    found = dict(mandatory(diagnostics(analyzer, result, policy_config("prod"))))
    # Off Run:ai the job names no queue either (no job.queue), which prod's config insists on.
    assert sorted(found) == ["job-names-a-queue", "runai-scheduler"]
    assert "a TrainJob on a Run:ai stack" in found["runai-scheduler"]
