"""checkpoint-claim-protection: shared access for multi-node jobs, survival on destroy."""

from __future__ import annotations

from policy.rules.checkpoint import checkpoint_claim_protection
from policy.rules.model import UNKNOWN, Violation
from tests.policy import samples

OPT_OUT_ALL = {"allowUnretained": True, "allowSingleNodeAccess": True}


def test_retained_read_write_many_claim_passes() -> None:
    assert checkpoint_claim_protection(samples.stack(), {}) == []


def test_read_write_once_claim_of_a_multi_node_job_fires() -> None:
    resources = samples.stack(pvc=samples.claim(access_mode="ReadWriteOnce"))
    [violation] = checkpoint_claim_protection(resources, {})
    assert violation.urn == "urn:claim"
    assert violation.message.startswith(
        "claim 'ddp-checkpoints' is mounted by the 2 pods of PyTorchJob 'ddp' but "
        "spec.accessModes is ['ReadWriteOnce']; a multi-node job needs ReadWriteMany"
    )


def test_read_write_once_is_fine_for_a_single_pod_job() -> None:
    resources = samples.stack(
        job=samples.pytorchjob(workers=0), pvc=samples.claim(access_mode="ReadWriteOnce")
    )
    assert checkpoint_claim_protection(resources, {}) == []


def test_unretained_unprotected_claim_fires() -> None:
    [violation] = checkpoint_claim_protection(samples.stack(pvc=samples.claim(retained=False)), {})
    assert violation == Violation(
        "checkpoint claim 'ddp-checkpoints' of PyTorchJob 'ddp' is neither protected nor "
        "retained on destroy: set checkpoints.retainOnDestroy (which adds metadata.annotations"
        "['pytorch-distributed/retain-on-destroy'] = 'true') or protect=True, or opt out with "
        "policy config allowUnretained: true",
        "urn:claim",
    )


def test_retain_annotation_must_say_true() -> None:
    pvc = samples.claim()
    pvc["metadata"]["annotations"]["pytorch-distributed/retain-on-destroy"] = "false"
    assert len(checkpoint_claim_protection(samples.stack(pvc=pvc), {})) == 1


def test_protect_counts_as_protection() -> None:
    resources = samples.stack(pvc=samples.claim(retained=False), protect_claim=True)
    assert checkpoint_claim_protection(resources, {}) == []


def test_stack_opt_outs_silence_each_check() -> None:
    resources = samples.stack(pvc=samples.claim(access_mode="ReadWriteOnce", retained=False))
    assert len(checkpoint_claim_protection(resources, {})) == 2
    assert len(checkpoint_claim_protection(resources, {"allowUnretained": True})) == 1
    assert len(checkpoint_claim_protection(resources, {"allowSingleNodeAccess": True})) == 1
    assert checkpoint_claim_protection(resources, OPT_OUT_ALL) == []


def test_only_a_real_boolean_opts_out() -> None:
    resources = samples.stack(pvc=samples.claim(retained=False))
    assert len(checkpoint_claim_protection(resources, {"allowUnretained": "true"})) == 1


def test_claim_the_stack_does_not_create_is_not_checked() -> None:
    # checkpoints.existingClaim: the job mounts a claim this stack never deletes.
    pvc = samples.claim(retained=False, access_mode="ReadWriteOnce")
    pvc["metadata"]["name"] = "someone-elses-claim"
    assert checkpoint_claim_protection(samples.stack(pvc=pvc), {}) == []


def test_claim_in_another_namespace_is_not_the_jobs_claim() -> None:
    pvc = samples.claim(retained=False)
    pvc["metadata"]["namespace"] = "other"
    assert checkpoint_claim_protection(samples.stack(pvc=pvc), {}) == []


def test_values_unknown_during_preview_do_not_fire() -> None:
    pvc = samples.claim(retained=False)
    pvc["spec"]["accessModes"] = UNKNOWN
    pvc["metadata"]["annotations"] = {"pytorch-distributed/retain-on-destroy": UNKNOWN}
    assert checkpoint_claim_protection(samples.stack(pvc=pvc), {}) == []
