"""The value grammar of stack settings: what a key's value may look like, and the words that say so.

Why its own module: components/settings.py is where a person comes to add or change a key, and
the declarations there should be the first thing they read. The grammar below (Kubernetes names,
quantities, image references, label objects, the lenient spellings of numbers and booleans) is
shared by many keys and changes rarely. Each type carries an `Allowed` text, which is both the
error message and the README table's "allowed" cell, so the two cannot say different things.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    PlainValidator,
    SkipValidation,
    StringConstraints,
)
from pydantic_core import PydanticCustomError

Platform = Literal["kubeflow", "runai"]
ImagePlatform = Literal["linux/amd64", "linux/arm64"]
AccessMode = Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]
ImageBuilder = Literal["buildkit", "classic"]
WaitFor = Literal["none", "created", "running", "succeeded"]
RestartPolicy = Literal["ExitCode", "OnFailure", "Never"]
CleanPodPolicy = Literal["None", "Running", "All"]
JobApiName = Literal["pytorchjob", "trainjob"]

# The operator names pods `<job>-worker-<index>` and creates a Service per replica; both must stay
# DNS-1035 labels (63 characters), so the job name leaves room for the longest suffix.
JOB_NAME_MAX = 48

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*\Z")
# Kubernetes resource.Quantity: a decimal number, then a binary (Ki..Ei) or decimal (n..E)
# suffix or an exponent. "10TB" is the classic mistake this rejects.
_QUANTITY = re.compile(
    r"^(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?\Z"
)
_QUANTITY_FACTORS: dict[str | None, Decimal] = {
    None: Decimal(1),
    **{suffix: Decimal(10) ** (3 * power) for power, suffix in enumerate("num", -3)},
    **{suffix: Decimal(10) ** (3 * power) for power, suffix in enumerate("kMGTPE", 1)},
    **{f"{suffix}i": Decimal(2) ** (10 * power) for power, suffix in enumerate("KMGTPE", 1)},
}
# Docker reference grammar, reduced to what we need: optional registry host[:port], lowercase
# path components, then an optional :tag and/or @sha256:<64 hex> digest.
_HOST_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_REGISTRY_HOST = rf"(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*(?::[0-9]+)?)"
_PATH_COMPONENT = r"(?:[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)"
_REPOSITORY_RE = rf"(?:{_REGISTRY_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG_RE = r"[\w][\w.-]{0,127}"
_DIGEST_RE = r"sha256:[0-9a-f]{64}"
_PINNED_REFERENCE = re.compile(rf"^{_REPOSITORY_RE}(?::{_TAG_RE})?@{_DIGEST_RE}\Z")


class Allowed(str):
    """What a key accepts, in the words of its error message and of the README's table."""


def _matching(pattern: str, allowed: str, max_length: int | None = None) -> Any:
    # Python's re (settings.py's ConfigDict), not pydantic's default Rust engine: the patterns
    # end in \Z, which refuses a trailing newline where $ would let "ddp\n" through.
    return Annotated[
        str, StringConstraints(pattern=pattern, max_length=max_length), Allowed(allowed)
    ]


def _integer(value: Any) -> Any:
    """An int or its spelling ("3"); pydantic's lax mode alone would take True as 1 and 2.0 as 2."""
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("not an integer")
    return value


def _boolean(value: Any) -> Any:
    """true/false or their spelling; lax mode alone would take "yes", "on" and 1 as true."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ValueError("not a boolean")
    return value


def _number_text(value: Any) -> Any:
    """YAML reads `cpu: 2` or `cpu: 0.5` as numbers; Kubernetes takes their plain spelling (never
    "5e-01", which would mean something else to Kubernetes)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return str(value) if isinstance(value, int) else format(Decimal(repr(value)), "f")


def _positive_quantity(text: str) -> str:
    try:
        positive = quantity_value(text) > 0
    except ArithmeticError:  # an exponent beyond what Decimal holds
        positive = False
    if not positive:
        raise ValueError("not a positive quantity")
    return text


def refusal(key: str, value: Any, allowed: str) -> PydanticCustomError:
    """A refusal in our words; `key` is relative to the object whose validator raises it."""
    context = {"key": key, "value": value, "allowed": allowed}
    return PydanticCustomError("settings", "{allowed}", context)


def _labels(raw: Any) -> Mapping[str, str]:
    """Extra labels (team, cost center) on the stack's objects: metadata only, so changing them
    updates the objects in place and never replaces the job."""
    if isinstance(raw, str):  # `--path labels.team` reaches the program as a JSON string
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError("not JSON") from None
    if not isinstance(raw, Mapping):
        raise ValueError("not an object")
    for name, value in raw.items():
        prefix, _, label = str(name).rpartition("/")
        if (prefix and not (_DNS1123_SUBDOMAIN.match(prefix) and len(prefix) <= 253)) or not (
            _LABEL_VALUE.match(label) and label
        ):
            raise refusal(
                str(name),
                value,
                "label names are [prefix/]name: name up to 63 characters of [A-Za-z0-9-_.] "
                "starting and ending alphanumeric, prefix a DNS subdomain",
            )
        if prefix == "app.kubernetes.io":
            raise refusal(str(name), value, "app.kubernetes.io/* labels are the stack's own")
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            raise refusal(
                str(name),
                value,
                "a label value is a string of up to 63 characters of [A-Za-z0-9-_.], "
                "empty or starting and ending alphanumeric",
            )
    return {str(name): value for name, value in raw.items()}


def _dns_label(max_length: int) -> Any:
    return _matching(
        rf"^{_DNS_LABEL}\Z",
        "expected a DNS-1123 label: lowercase letters, digits and '-', starting and ending with "
        f"a letter or digit, at most {max_length} characters",
        max_length,
    )


Integer = Annotated[int, BeforeValidator(_integer), Allowed("expected an integer")]
UserId = Annotated[
    int,
    BeforeValidator(_integer),
    Allowed("expected a numeric user id other than root's 0 (job.runAsRoot: true says root):"),
]
GroupId = Annotated[int, BeforeValidator(_integer), Allowed("expected a numeric group id:")]
Boolean = Annotated[bool, BeforeValidator(_boolean), Allowed("expected true or false")]
Text = _matching(r"\S", "expected a non-empty string")
DnsLabel = _dns_label(63)
RunaiProject = _dns_label(57)  # Run:ai's namespace runai-<project> must stay a DNS label
JobName = _matching(
    r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z",
    f"expected a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) of "
    f"at most {JOB_NAME_MAX} characters, so the operator's pod and service names stay valid",
    JOB_NAME_MAX,
)
ObjectName = _matching(
    _DNS1123_SUBDOMAIN.pattern,
    "expected a Kubernetes object name (DNS-1123 subdomain: lowercase letters, digits, '-', "
    "'.'), at most 253 characters",
    253,
)
Quantity = Annotated[
    str,
    BeforeValidator(_number_text),
    StringConstraints(pattern=_QUANTITY.pattern),
    AfterValidator(_positive_quantity),
    Allowed(
        "expected a positive Kubernetes quantity such as 500m, 2, 16Gi or 10Ti "
        "(binary suffixes Ki/Mi/Gi/Ti/Pi/Ei, decimal k/M/G/T/P/E; not 'GB'/'TB')"
    ),
]
ImageRepository = _matching(
    rf"^{_REPOSITORY_RE}\Z",
    "expected an image repository without tag, e.g. registry.example.com/team/trainer",
)
ImageRef = _matching(
    rf"^{_REPOSITORY_RE}(?::{_TAG_RE})?(?:@{_DIGEST_RE})?\Z",
    "expected an image reference, repo:tag or repo@sha256:<64 hex>",
)
RegistryServer = _matching(
    rf"^(?:https?://)?{_REGISTRY_HOST}(?:/[\w./-]*)?\Z",
    "expected a registry host such as registry.example.com[:port]",
)
TaskRef = _matching(
    r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*\Z",
    "expected MODULE:FUNCTION, e.g. trainer.tasks:regression",
)
MountPath = _matching(
    r"^(?!/dev/shm\Z|/opt/pytorch-distributed)(/(?!\.\.?(/|\Z))[^/:\n]+)+\Z",
    "expected an absolute directory such as /checkpoints (no trailing '/', '..', ':', "
    "and not /, /dev/shm or the image's /opt/pytorch-distributed)",
)
Labels = Annotated[
    Mapping[str, str],
    PlainValidator(_labels),
    Allowed("expected an object of label names to strings"),
]
# A secret pulumi.Output[str] in the program, a plain str (or REDACTED, or None) offline: never
# validated, shown or serialised, and never read from the registry object (settings.py's
# parse_settings).
Secret = Annotated[Any, SkipValidation, Allowed("a secret: pulumi config set --secret")]


def quantity_value(text: str) -> Decimal:
    """The numeric value of a Kubernetes quantity ("500m" -> 0.5, "1Gi" -> 1073741824)."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    suffix = match["suffix"]
    if suffix is not None and suffix[0] in "eE" and len(suffix) > 1:
        return Decimal(match["number"]) * Decimal(10) ** int(suffix[1:])
    return Decimal(match["number"]) * _QUANTITY_FACTORS[suffix]


def registry_host(repository: str) -> str | None:
    """The registry host[:port] an image repository lives on; None for Docker Hub's short
    names (`team/trainer`), which carry no host."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def server_host(server: str) -> str:
    return re.sub(r"^https?://", "", server).split("/", 1)[0]


def is_loopback(host: str | None) -> bool:
    """A registry on this machine: `localhost` or an address in 127.0.0.0/8, with any port."""
    name = (host or "").partition(":")[0]
    return name == "localhost" or re.fullmatch(r"127(\.[0-9]{1,3}){3}", name) is not None


def is_pinned(reference: str) -> bool:
    """True when an image reference names an immutable digest (`repo[:tag]@sha256:...`)."""
    return _PINNED_REFERENCE.match(reference) is not None
