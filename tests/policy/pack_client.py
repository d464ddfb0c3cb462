"""Play the Pulumi engine's part against the policy pack: start policy/__main__.py as Pulumi does
and speak the analyzer gRPC protocol to it (the Pulumi CLI is not available to the tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import grpc
from google.protobuf import struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy import EnforcementLevel

from policy.rules.pack import build_policies
from tests.conftest import REPO_ROOT

Stub = analyzer_pb2_grpc.AnalyzerStub


@contextmanager
def running_pack() -> Iterator[Stub]:
    # `python policy` runs policy/__main__.py with policy/ on sys.path, as Pulumi's runpy does.
    process = subprocess.Popen(
        [sys.executable, "policy"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port.isdigit():
            process.kill()
            raise RuntimeError(f"pack did not print its port: {port!r} {process.communicate()}")
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        try:
            yield Stub(channel)
        finally:
            channel.close()
    finally:
        process.kill()
        process.wait(timeout=30)


def struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


LEVELS = {"mandatory": analyzer_pb2.MANDATORY, "advisory": analyzer_pb2.ADVISORY}


def configure(stub: Stub, config: Mapping[str, Mapping[str, Any]]) -> None:
    """What the engine sends for --policy-pack-config: every policy, with its level (the pack's,
    or the config's `enforcementLevel`, which the engine takes out of the properties)."""
    request = analyzer_pb2.ConfigureAnalyzerRequest()
    for policy in build_policies():
        properties = dict(config.get(policy.name, {}))
        declared = "mandatory" if policy.enforcement_level == EnforcementLevel.MANDATORY else ""
        level = LEVELS[properties.pop("enforcementLevel", declared or "advisory")]
        request.policyConfig[policy.name].CopyFrom(
            analyzer_pb2.PolicyConfig(enforcementLevel=level, properties=struct(properties))
        )
    stub.Configure(request)


def analyze(stub: Stub, type_: str, props: Mapping[str, Any]) -> dict[str, str]:
    """One resource through every resource policy: policy name -> message."""
    response = stub.Analyze(
        analyzer_pb2.AnalyzeRequest(type=type_, properties=struct(props), urn="urn:x", name="x")
    )
    return {d.policyName: d.message for d in response.diagnostics}
