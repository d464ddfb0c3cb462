"""settings/stack.py's `network` section (NetworkSettings, EgressSettings) and the values it reads
(settings/values.py: IpBlock, Ports, PodLabels): the defaults, the spellings `pulumi config set
--path` leaves, and every refusal, one line naming the key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from settings.stack import SettingsError, load_stack_file, parse_args, parse_settings
from tests.settings.config import MINIMAL, with_values

ADDRESS_WORDS = (
    "expected an address block in CIDR notation with no host bits set, such as 10.96.0.0/12, "
    "192.0.2.10/32 or 2001:db8::/32"
)
PORT_WORDS = "expected a list of port numbers, each 1 to 65535"
EGRESS_WORDS = "expected a list of objects with keys cidr, namespace, podLabels, ports"
BOTH_WORDS = (
    "either an address block or pods (namespace, podLabels), not both: give each its own entry"
)
NEITHER_WORDS = (
    "an egress destination is an address block (cidr) or pods (namespace and/or podLabels)"
)


def egress(*destinations: Any) -> dict[str, Any]:
    return with_values(network={"egress": list(destinations)})


def test_by_default_the_policy_is_on_and_egress_is_open() -> None:
    network = parse_settings(MINIMAL).network
    assert network.policy is True
    assert network.egress is None


def test_the_committed_stacks_all_get_the_policy(repo_root: Path) -> None:
    for path in sorted(repo_root.glob("Pulumi.*.yaml")):
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        network = load_stack_file(stack, repo_root).network
        assert (network.policy, network.egress) == (True, None), stack


def test_destinations_are_read_as_written_and_addresses_in_their_network_form() -> None:
    settings = parse_settings(
        egress(
            {"cidr": " 192.0.2.10/32 ", "ports": [443, 9000]},
            {"cidr": "2001:DB8::/32"},
            {"namespace": "storage", "podLabels": {"app": "minio"}},
            {"podLabels": {"app.kubernetes.io/name": "mirror"}},
            {"namespace": "monitoring"},
        )
    )
    destinations = settings.network.egress
    assert destinations is not None
    assert [(d.cidr, d.namespace, dict(d.pod_labels), d.ports) for d in destinations] == [
        ("192.0.2.10/32", None, {}, (443, 9000)),
        ("2001:db8::/32", None, {}, ()),
        (None, "storage", {"app": "minio"}, ()),
        (None, None, {"app.kubernetes.io/name": "mirror"}, ()),
        (None, "monitoring", {}, ()),
    ]
    # An empty list is a choice too: the job's own pods and name resolution only.
    assert parse_settings(egress()).network.egress == ()


def test_string_spellings_from_config_set_path_are_accepted() -> None:
    """`pulumi config set --path network.policy false` and `... network.egress[0].ports[0] 53`
    may leave strings in the stack file."""
    off = parse_settings(with_values(network={"policy": "false"}))
    assert off.network.policy is False and off.network.egress is None
    on = parse_settings(
        with_values(network={"policy": "true", "egress": [{"cidr": "10.0.0.0/8", "ports": ["53"]}]})
    )
    assert on.network.policy is True
    assert on.network.egress is not None and on.network.egress[0].ports == (53,)


def test_a_stack_file_sets_the_network_as_config_set_path_writes_it(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/t}\n"
        "  pytorch-distributed:network:\n"
        "    policy: 'true'\n"
        "    egress:\n"
        "      - cidr: 192.0.2.0/24\n"
        "        ports:\n"
        "          - '443'\n"
        "      - namespace: kube-system\n"
        "        podLabels:\n"
        "          k8s-app: kube-dns\n",
        encoding="utf-8",
    )
    network = load_stack_file("s", tmp_path).network
    assert network.egress is not None
    assert [(d.cidr, d.namespace, dict(d.pod_labels), d.ports) for d in network.egress] == [
        ("192.0.2.0/24", None, {}, (443,)),
        (None, "kube-system", {"k8s-app": "kube-dns"}, ()),
    ]


def test_a_programs_arguments_are_read_as_the_config_is() -> None:
    """TrainingEnvironmentArgs by attribute names (`pod_labels`); a program in another language
    passes its `ports: [443]` through a protobuf Struct, as [443.0]."""
    settings = parse_args(
        {
            "image": {"repository": "registry.example.com/t"},
            "network": {
                "egress": [
                    {"cidr": "192.0.2.10/32", "ports": [443.0, 9000.0]},
                    {"namespace": "storage", "pod_labels": {"app": "minio"}},
                ]
            },
        }
    )
    destinations = settings.network.egress
    assert destinations is not None
    assert destinations[0].ports == (443, 9000)
    assert all(isinstance(port, int) for port in destinations[0].ports)
    assert dict(destinations[1].pod_labels) == {"app": "minio"}
    with pytest.raises(SettingsError, match=r"network\.egress\[0\]\.ports\[0\] = 443\.5: "):
        parse_args(
            {
                "image": {"repository": "registry.example.com/t"},
                "network": {"egress": [{"cidr": "192.0.2.10/32", "ports": [443.5]}]},
            }
        )
    with pytest.raises(SettingsError, match=r"network\.egress\[0\]\.ports\[0\] = 443\.0: "):
        parse_settings(egress({"cidr": "192.0.2.10/32", "ports": [443.0]}))  # a stack file's


# (id, values, the whole message but for the project prefix)
REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    (
        "cidr-with-host-bits",
        egress({"cidr": "10.0.0.1/8"}),
        f"invalid config network.egress[0].cidr = '10.0.0.1/8': {ADDRESS_WORDS}",
    ),
    (
        "cidr-not-an-address",
        egress({"cidr": "storage.example.com"}),
        f"invalid config network.egress[0].cidr = 'storage.example.com': {ADDRESS_WORDS}",
    ),
    (
        "cidr-and-namespace",
        egress({"cidr": "10.0.0.0/8", "namespace": "storage"}),
        f"invalid config network.egress[0].cidr = '10.0.0.0/8': {BOTH_WORDS}",
    ),
    (
        "cidr-and-pod-labels",
        egress({"cidr": "10.0.0.0/8"}, {"cidr": "192.0.2.0/24", "podLabels": {"app": "x"}}),
        f"invalid config network.egress[1].cidr = '192.0.2.0/24': {BOTH_WORDS}",
    ),
    ("empty-destination", egress({}), f"missing config network.egress[0].cidr: {NEITHER_WORDS}"),
    (
        "ports-but-no-destination",
        egress({"ports": [443]}),
        f"missing config network.egress[0].cidr: {NEITHER_WORDS}",
    ),
    (
        "port-zero",
        egress({"cidr": "10.0.0.0/8", "ports": [0]}),
        f"invalid config network.egress[0].ports[0] = 0: {PORT_WORDS}",
    ),
    (
        "port-too-high",
        egress({"cidr": "10.0.0.0/8", "ports": [443, 70000]}),
        f"invalid config network.egress[0].ports[1] = 70000: {PORT_WORDS}",
    ),
    (
        "port-not-a-number",
        egress({"cidr": "10.0.0.0/8", "ports": ["x"]}),
        f"invalid config network.egress[0].ports[0] = 'x': {PORT_WORDS}",
    ),
    (
        "port-a-boolean",
        egress({"cidr": "10.0.0.0/8", "ports": [True]}),
        f"invalid config network.egress[0].ports[0] = True: {PORT_WORDS}",
    ),
    (
        "ports-not-a-list",
        egress({"cidr": "10.0.0.0/8", "ports": 443}),
        f"invalid config network.egress[0].ports = 443: {PORT_WORDS}",
    ),
    (
        "egress-a-mapping",
        with_values(network={"egress": {"cidr": "10.0.0.0/8"}}),
        f"invalid config network.egress = {{'cidr': '10.0.0.0/8'}}: {EGRESS_WORDS}",
    ),
    (
        "egress-a-string",
        with_values(network={"egress": "10.0.0.0/8"}),
        f"invalid config network.egress = '10.0.0.0/8': {EGRESS_WORDS}",
    ),
    (
        "egress-without-the-policy",
        with_values(network={"policy": False, "egress": [{"cidr": "10.0.0.0/8"}]}),
        "invalid config network.egress = '[...]': the egress destinations are rules of the job's "
        "NetworkPolicy: set network.policy: true, or leave network.egress out",
    ),
    (
        "empty-egress-without-the-policy",
        with_values(network={"policy": "false", "egress": []}),
        "invalid config network.egress = '[...]': the egress destinations are rules of the job's "
        "NetworkPolicy: set network.policy: true, or leave network.egress out",
    ),
    (
        "unknown-key-in-a-destination",
        egress({"cidr": "10.0.0.0/8", "port": [443]}),
        "invalid config network.egress[0].port = [443]: unknown key; allowed keys are cidr, "
        "namespace, podLabels, ports",
    ),
    (
        "unknown-network-key",
        with_values(network={"ingress": []}),
        "invalid config network.ingress = []: unknown key; allowed keys are policy, egress",
    ),
    (
        "bad-pod-label-name",
        egress({"podLabels": {"-app": "minio"}}),
        "invalid config network.egress[0].podLabels.-app = 'minio': a label name is "
        "[prefix/]name: name up to 63 characters of [A-Za-z0-9-_.] starting and ending "
        "alphanumeric, prefix a DNS subdomain",
    ),
    (
        "bad-pod-label-value",
        egress({"podLabels": {"app": "-minio-"}}),
        "invalid config network.egress[0].podLabels.app = '-minio-': a label value is a string "
        "of up to 63 characters of [A-Za-z0-9-_.], empty or starting and ending alphanumeric",
    ),
    (
        "bad-namespace",
        egress({"namespace": "Storage_NS"}),
        "invalid config network.egress[0].namespace = 'Storage_NS': expected a DNS-1123 label: "
        "lowercase letters, digits and '-', starting and ending with a letter or digit, at most "
        "63 characters",
    ),
    (
        "policy-not-a-boolean",
        with_values(network={"policy": "maybe"}),
        "invalid config network.policy = 'maybe': expected true or false",
    ),
    (
        "network-a-list",
        with_values(network=[]),
        "invalid config network = []: expected an object with keys policy, egress",
    ),
]


@pytest.mark.parametrize(
    ("values", "message"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_network_refusals_are_one_line_naming_the_key(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(values)
    refused = str(raised.value)
    assert "\n" not in refused
    assert refused == message.replace(" config ", " config pytorch-distributed:", 1)
    assert re.fullmatch(r"(invalid|missing) config pytorch-distributed:network\S* .+", refused)
