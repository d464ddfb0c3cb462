"""components/pytorch_job.py under mocks, through the committed stacks' programs: the PyTorchJob
is replaced, never patched, and made after the claim and the image it runs (the job's resource
options are components/watched_job.py's, shared with the TrainJob: test_train_job.py)."""

from __future__ import annotations

import pytest

from tests.components.conftest import IMAGE, JOB, PVC
from tests.pulumi_harness import ProgramResult


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_job_is_replaced_not_patched(stack: str, dev: ProgramResult, prod: ProgramResult) -> None:
    result = {"dev": dev, "prod": prod}[stack]
    job = result.one(JOB)
    # The spec, and the labels Kueue admitted the job by (its webhook refuses to change them).
    assert job.replace_on_changes == [
        "spec",
        'metadata.labels["kueue.x-k8s.io/queue-name"]',
        'metadata.labels["kueue.x-k8s.io/priority-class"]',
    ]
    assert job.delete_before_replace is True
    assert result.one(PVC).urn in job.dependencies
    assert result.one(IMAGE).urn in job.dependencies
