"""components/stack_secret.py under mocks, through the prod stack's program: the image pull
secret, its wiring into the job's pods, and its data reaching the engine only as a secret."""

from __future__ import annotations

import base64
import json

from builders.manifests import docker_config
from tests.components.conftest import JOB, PASSWORD, SECRET, pod_specs
from tests.pulumi_harness import ProgramResult, Secret


def test_pull_secret_wiring(prod: ProgramResult) -> None:
    secret = prod.one(SECRET)
    assert secret.inputs["type"] == "kubernetes.io/dockerconfigjson"
    name = secret.inputs["metadata"]["name"]
    for pod in pod_specs(prod).values():
        assert pod["imagePullSecrets"] == [{"name": name}]
    assert secret.urn in prod.one(JOB).dependencies
    # The data reaches the engine only as a secret, and decodes to the right credential.
    assert isinstance(secret.inputs["data"], Secret)
    assert "data" in secret.additional_secret_outputs
    encoded = secret.plain_inputs()["data"][".dockerconfigjson"]
    config = json.loads(base64.b64decode(encoded))
    entry = config["auths"]["registry.example.com"]
    assert (entry["username"], entry["password"]) == ("ml-robot", PASSWORD)
    assert config == docker_config("registry.example.com", "ml-robot", PASSWORD)
