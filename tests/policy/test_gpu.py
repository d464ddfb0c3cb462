"""gpu-requests-match-nproc: GPUs per pod equal nprocPerNode; limits and requests are set."""

from __future__ import annotations

from policy.rules.gpu import gpu_requests_match_nproc
from policy.rules.model import GPU_RESOURCE_ANNOTATION, PYTORCHJOB_TYPE, SECRET_TYPE, UNKNOWN
from tests.policy import samples

WORKER = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]"


def check(job: dict) -> list[str]:
    return gpu_requests_match_nproc(PYTORCHJOB_TYPE, job)


def training_container(job: dict, replica_type: str) -> dict:
    return job["spec"]["pytorchReplicaSpecs"][replica_type]["template"]["spec"]["containers"][0]


def test_compliant_gpu_and_cpu_jobs_pass() -> None:
    assert check(samples.pytorchjob(gpus=4)) == []
    assert check(samples.pytorchjob(gpus=0)) == []


def test_other_resource_types_are_ignored() -> None:
    assert gpu_requests_match_nproc(SECRET_TYPE, {}) == []


def test_more_gpus_than_processes_fire() -> None:
    job = samples.pytorchjob(gpus=1)
    training_container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"] = "2"
    assert check(job) == [
        f"{WORKER}.resources.limits['nvidia.com/gpu'] is '2' but spec.nprocPerNode is 1; "
        "each pod must get one GPU per process"
    ]


def test_worker_without_gpu_in_a_gpu_job_fires() -> None:
    job = samples.pytorchjob(gpus=2)
    del training_container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"]
    messages = check(job)
    assert len(messages) == 1
    assert messages[0].startswith(f"{WORKER}.resources.limits['nvidia.com/gpu'] is None")


def test_gpu_request_different_from_limit_fires() -> None:
    job = samples.pytorchjob(gpus=2)
    training_container(job, "Worker")["resources"]["requests"]["nvidia.com/gpu"] = "1"
    assert check(job) == [
        f"{WORKER}.resources.requests['nvidia.com/gpu'] is '1' but the limit is '2'; "
        "GPU requests must equal limits"
    ]


def test_non_numeric_nproc_in_a_gpu_job_fires() -> None:
    job = samples.pytorchjob(gpus=1)
    job["spec"]["nprocPerNode"] = "auto"
    messages = check(job)
    assert len(messages) == 1
    assert messages[0].startswith("spec.nprocPerNode is 'auto'")


def test_missing_memory_limit_fires_in_cpu_jobs_too() -> None:
    job = samples.pytorchjob(gpus=0)
    del training_container(job, "Worker")["resources"]["limits"]
    assert check(job) == [f"{WORKER}.resources.limits.memory is missing"]


def test_missing_cpu_request_fires() -> None:
    job = samples.pytorchjob(gpus=1)
    del training_container(job, "Worker")["resources"]["requests"]["cpu"]
    assert check(job) == [f"{WORKER}.resources.requests.cpu is missing"]


def test_resources_unknown_during_preview_do_not_fire() -> None:
    job = samples.pytorchjob(gpus=1)
    training_container(job, "Worker")["resources"] = UNKNOWN
    assert check(job) == []


def with_gpu_resource(job: dict, resource: str) -> dict:
    """`job` asking for its GPUs as `resource`, which it states as the program does."""
    job.setdefault("metadata", {}).setdefault("annotations", {})[GPU_RESOURCE_ANNOTATION] = resource
    for replica_type in job["spec"]["pytorchReplicaSpecs"]:
        for section in ("limits", "requests"):
            resources = training_container(job, replica_type)["resources"].get(section, {})
            if "nvidia.com/gpu" in resources:
                resources[resource] = resources.pop("nvidia.com/gpu")
    return job


def test_the_jobs_gpu_resource_is_the_one_compared_with_nproc() -> None:
    mig = "nvidia.com/mig-1g.10gb"
    assert check(with_gpu_resource(samples.pytorchjob(gpus=2), mig)) == []
    job = with_gpu_resource(samples.pytorchjob(gpus=2), mig)
    training_container(job, "Worker")["resources"]["limits"][mig] = "1"
    assert check(job) == [
        f"{WORKER}.resources.limits['{mig}'] is '1' but spec.nprocPerNode is 2; "
        "each pod must get one GPU per process"
    ]


def test_nvidias_gpus_are_not_the_jobs_when_it_names_another_resource() -> None:
    """A job stating amd.com/gpu is a GPU job by that resource; one asking for none of it is a
    CPU job, whatever nprocPerNode says."""
    job = samples.pytorchjob(gpus=0)
    job.setdefault("metadata", {}).setdefault("annotations", {})[GPU_RESOURCE_ANNOTATION] = (
        "amd.com/gpu"
    )
    job["spec"]["nprocPerNode"] = "auto"
    assert check(job) == []
