"""Schema checks for the manifests the stack applies, shared by the builder and program tests.

Core kinds are validated against the real Kubernetes OpenAPI schemas (kubernetes-validate, strict:
unknown fields fail). A PyTorchJob is a custom resource, so its pod templates are validated as a
core PodTemplate and the rest against the training operator's admission rules as the policy pack
states them (`policy.rules.operator.admission_violations`): one statement of those rules, so a
rule the pack learns is one the builders' output is held to as well. Pod Security "restricted"
and the token likewise (`restricted_violations`, the pack's `policy.rules.pod_security`).

A PodMonitor is the Prometheus Operator's custom resource, whose CRD the repository does not
vendor: its metadata and label selector are validated as the core types they are (ObjectMeta,
LabelSelector), the rest against the fields and patterns of the Operator's
`monitoring.coreos.com/v1` types (`PodMonitorSpec`, `PodMetricsEndpoint`, `Duration`), written
down below.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate

from policy.rules import pod_security
from policy.rules.operator import admission_violations

KUBERNETES_VERSION = "1.34.0"


def validate_core(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def validate_pytorchjob(manifest: dict[str, Any]) -> None:
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "PyTorchJob"
    problems = admission_violations(manifest)
    assert not problems, problems
    for replica_type, replica in manifest["spec"]["pytorchReplicaSpecs"].items():
        validate_core(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"{manifest['metadata']['name']}-{replica_type.lower()}"},
                "template": replica["template"],
            }
        )


# The Prometheus Operator's v1 types (pkg/apis/monitoring/v1: podmonitor_types.go, types.go):
# the fields a PodMonitorSpec and a PodMetricsEndpoint have, and the pattern of `Duration`.
POD_MONITOR_SPEC_FIELDS = frozenset(
    {
        "jobLabel",
        "podTargetLabels",
        "podMetricsEndpoints",
        "selector",
        "selectorMechanism",
        "namespaceSelector",
        "sampleLimit",
        "targetLimit",
        "scrapeProtocols",
        "fallbackScrapeProtocol",
        "labelLimit",
        "labelNameLengthLimit",
        "labelValueLengthLimit",
        "nativeHistogramBucketLimit",
        "nativeHistogramMinBucketFactor",
        "convertClassicHistogramsToNHCB",
        "keepDroppedTargets",
        "attachMetadata",
        "scrapeClass",
        "bodySizeLimit",
    }
)
POD_METRICS_ENDPOINT_FIELDS = frozenset(
    {
        "port",
        "portNumber",
        "targetPort",
        "path",
        "scheme",
        "params",
        "interval",
        "scrapeTimeout",
        "honorLabels",
        "honorTimestamps",
        "trackTimestampsStaleness",
        "metricRelabelings",
        "relabelings",
        "filterRunning",
        "enableHttp2",
        "followRedirects",
        "proxyUrl",
        "noProxy",
        "proxyFromEnvironment",
        "proxyConnectHeader",
        "basicAuth",
        "oauth2",
        "authorization",
        "bearerTokenSecret",
        "tlsConfig",
    }
)
OPERATOR_DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
# A container port's name, as a PodMonitor's `port` names it: an IANA service name
# (apimachinery's IsValidPortName: at most 15 characters, lowercase letters, digits and '-', at
# least one letter, no '-' at either end or twice in a row).
PORT_NAME = re.compile(r"^(?=.*[a-z])(?!-)(?!.*--)[a-z0-9-]{1,15}(?<!-)$")


def validate_pod_monitor(manifest: dict[str, Any]) -> None:
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1", manifest["apiVersion"]
    assert manifest["kind"] == "PodMonitor", manifest["kind"]
    assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}, sorted(manifest)
    validate_core({"apiVersion": "v1", "kind": "ConfigMap", "metadata": manifest["metadata"]})
    spec = manifest["spec"]
    assert set(spec) <= POD_MONITOR_SPEC_FIELDS, sorted(set(spec) - POD_MONITOR_SPEC_FIELDS)
    # `selector` is required; an empty one would select every pod of the namespace.
    assert spec["selector"], spec
    validate_core(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": manifest["metadata"]["name"]},
            "spec": {"selector": spec["selector"]},
        }
    )
    endpoints = spec["podMetricsEndpoints"]
    assert isinstance(endpoints, list) and endpoints, endpoints
    for endpoint in endpoints:
        unknown = set(endpoint) - POD_METRICS_ENDPOINT_FIELDS
        assert not unknown, sorted(unknown)
        port = endpoint.get("port")
        assert port is None or (isinstance(port, str) and PORT_NAME.match(port)), port
        path = endpoint.get("path")
        assert path is None or (isinstance(path, str) and path.startswith("/")), path
        for key in ("interval", "scrapeTimeout"):
            if key in endpoint:
                value = endpoint[key]
                assert isinstance(value, str) and OPERATOR_DURATION.match(value), (key, value)


def validate_manifest(manifest: dict[str, Any]) -> None:
    if manifest.get("kind") == "PyTorchJob":
        validate_pytorchjob(manifest)
    elif manifest.get("kind") == "PodMonitor":
        validate_pod_monitor(manifest)
    else:
        validate_core(manifest)


def restricted_violations(manifest: dict[str, Any]) -> list[str]:
    """Why the pods of a job (or the TrainingRuntime under a TrainJob's pods) would not meet Pod
    Security "restricted" or would hold a service account token, by the pack's rules (all but
    `run_as_root`, which reports what a stack says on purpose)."""
    resource_type = f"kubernetes:{manifest['apiVersion']}:{manifest['kind']}"
    rules = (
        pod_security.run_as_non_root,
        pod_security.run_as_user,
        pod_security.seccomp_profile,
        pod_security.no_privilege_escalation,
        pod_security.drop_capabilities,
        pod_security.volume_types,
        pod_security.no_service_account_token,
    )
    return [message for rule in rules for message in rule(resource_type, manifest)]
