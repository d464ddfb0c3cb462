"""The value grammar of stack settings: what a key's value may look like, and the words that say so.

Why its own module: settings/stack.py is where a person comes to add or change a key, and
the declarations there should be the first thing they read. The grammar below (Kubernetes names,
quantities, image references, label objects, the lenient spellings of numbers and booleans) is
shared by many keys and changes rarely. Each type carries an `Allowed` text, which is both the
error message and the docs' settings table's "allowed" cell, so the two cannot say different things.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
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
Launcher = Literal["torchrun", "none"]
# The trainer's --parallelism choices (trainer/cli.py's PARALLELISMS; a test holds them equal).
Parallelism = Literal["ddp", "fsdp"]
TolerationOperator = Literal["Equal", "Exists"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

# Where the pods start (their workingDir) and where the trainer image keeps its code: no volume
# may be mounted over it (nor over /dev/shm or the checkpoint claim).
APP_DIR = "/opt/pytorch-distributed"
SHM_DIR = "/dev/shm"
# What every pod's environment tells any training script (docs/tutorials/your-own-model.md): the
# run's directory on the checkpoint claim, the job's name and the stack's.
CHECKPOINT_DIR_ENV = "CHECKPOINT_DIR"
JOB_NAME_ENV = "JOB_NAME"
STACK_NAME_ENV = "STACK_NAME"
ENV_CONTRACT = (CHECKPOINT_DIR_ENV, JOB_NAME_ENV, STACK_NAME_ENV)
# With `metrics.enabled`, every training container is told the port rank 0 serves Prometheus'
# `/metrics` on (the project's trainer does; a job.command should, by the same convention).
METRICS_PORT_ENV = "METRICS_PORT"
# What the pods of an s3 stack are told, in boto3's own names (trainer/storage/s3.py reads them
# through boto3): where the service is (unset: AWS), its region, and the credentials (from the
# stack's Secret; without them, the pod's own identity: IRSA, workload identity).
S3_ENDPOINT_ENV = "AWS_ENDPOINT_URL_S3"
S3_REGION_ENV = "AWS_DEFAULT_REGION"
S3_ACCESS_KEY_ID_ENV = "AWS_ACCESS_KEY_ID"
S3_SECRET_ACCESS_KEY_ENV = "AWS_SECRET_ACCESS_KEY"
# Names the stack, the job's controller, torchrun or the kubelet set in the pods: a job.env or
# job.secretEnv entry of one of them would be overwritten or would confuse the launcher.
RESERVED_ENV = (
    *ENV_CONTRACT,
    METRICS_PORT_ENV,
    "PYTHONUNBUFFERED",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "JOB_COMPLETION_INDEX",
    "HOSTNAME",
)
RESERVED_ENV_PREFIXES = ("PET_", "TORCHELASTIC_")

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


# What a secret is shown as wherever it would otherwise appear (the offline tools' stand-in).
REDACTED = "<redacted>"


class Allowed(str):
    """What a key accepts, in the words of its error message and of the docs' settings table."""


def _matching(pattern: str, allowed: str, max_length: int | None = None) -> Any:
    # Python's re (stack.py's ConfigDict), not pydantic's default Rust engine: the patterns
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
    rf"^(?!{SHM_DIR}\Z|{APP_DIR})(/(?!\.\.?(/|\Z))[^/:\n]+)+\Z",
    "expected an absolute directory such as /checkpoints (no trailing '/', '..', ':', "
    "and not /, /dev/shm or the image's /opt/pytorch-distributed)",
)
Labels = Annotated[
    Mapping[str, str],
    PlainValidator(_labels),
    Allowed("expected an object of label names to strings"),
]


def _label_key_problem(name: str) -> bool:
    prefix, _, label = name.rpartition("/")
    bad_prefix = bool(prefix) and not (_DNS1123_SUBDOMAIN.match(prefix) and len(prefix) <= 253)
    return bad_prefix or not (label and _LABEL_VALUE.match(label))


def _as_text(value: Any) -> Any:
    """A YAML or `--path` number or boolean as the string a command line or environment gets
    ("10", "0.5", "true"); anything else as it is (and refused if not a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return _number_text(value)


def _string_map(raw: Any) -> Mapping[str, Any]:
    if isinstance(raw, str):  # a `--path` object can reach the program as a JSON string
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError("not JSON") from None
    if not isinstance(raw, Mapping):
        raise ValueError("not an object")
    return raw


def _node_selector(raw: Any) -> Mapping[str, str]:
    """Labels an object must carry to be selected (a node, a pod): any label, the cluster's
    own included."""
    selector = _string_map(raw)
    for name, value in selector.items():
        if _label_key_problem(str(name)):
            raise refusal(
                str(name),
                value,
                "a label name is [prefix/]name: name up to 63 characters of [A-Za-z0-9-_.] "
                "starting and ending alphanumeric, prefix a DNS subdomain",
            )
        value = _as_text(value)
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            raise refusal(
                str(name),
                value,
                "a label value is a string of up to 63 characters of [A-Za-z0-9-_.], "
                "empty or starting and ending alphanumeric",
            )
    return {str(name): _as_text(value) for name, value in selector.items()}


_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
_ENV_NAME_ALLOWED = (
    "an environment variable name is letters, digits, '_', '-' and '.', not starting with a digit"
)


def env_name_problem(name: str) -> str | None:
    """Why `name` cannot be a job.env or job.secretEnv entry, or None."""
    if not _ENV_NAME.match(name):
        return _ENV_NAME_ALLOWED
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
        return (
            "the stack, the job's controller or torchrun sets this variable in every pod "
            f"(reserved: {', '.join(RESERVED_ENV)} and {'*, '.join(RESERVED_ENV_PREFIXES)}*)"
        )
    return None


def _env(raw: Any) -> Mapping[str, str]:
    """Plain environment variables: names and values shown in the manifests, state and render."""
    env = _string_map(raw)
    for name, value in env.items():
        if (problem := env_name_problem(str(name))) is not None:
            raise refusal(str(name), value, problem)
        if not isinstance(_as_text(value), str):
            raise refusal(str(name), value, "expected a string value (job.env is plain text)")
    return {str(name): _as_text(value) for name, value in env.items()}


def is_secret_value(value: Any) -> bool:
    """A value the stack holds as a secret: a pulumi Output (the program wraps every secret it
    reads from the config) or REDACTED (the offline tools' stand-in for an encrypted value)."""
    if isinstance(value, str):
        return value == REDACTED
    import pulumi

    return isinstance(value, pulumi.Output)


def _secret_env(raw: Any) -> Mapping[str, Any]:
    """Environment variables whose values are secrets of the stack's config: each must be one
    (the program marks them, the offline tools see their ciphertext), never a plain string."""
    env = _string_map(raw)
    for name, value in env.items():
        if (problem := env_name_problem(str(name))) is not None:
            raise refusal(str(name), REDACTED, problem)
        if not is_secret_value(value):
            raise refusal(
                str(name),
                REDACTED,
                "expected a secret of the stack's config: pulumi config set --secret --path "
                f"job.secretEnv.{name} VALUE (a plain value belongs in job.env, and a "
                "credential's never does)",
            )
    return {str(name): value for name, value in env.items()}


_BUILD_ARG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
BASE_IMAGE_ARG = "BASE_IMAGE"


def _build_args(raw: Any) -> Mapping[str, str]:
    args = _string_map(raw)
    for name, value in args.items():
        if not _BUILD_ARG.match(str(name)):
            raise refusal(str(name), value, "a build argument's name is letters, digits and '_'")
        if name == BASE_IMAGE_ARG:
            raise refusal(str(name), value, "BASE_IMAGE is image.baseImage: set that instead")
        if not isinstance(_as_text(value), str):
            raise refusal(str(name), value, "expected a string value")
    return {str(name): _as_text(value) for name, value in args.items()}


def _command(raw: Any) -> tuple[str, ...]:
    """A command line as a list of words: a string would leave the splitting to a guess."""
    if isinstance(raw, str) or not isinstance(raw, list | tuple) or not raw:
        raise ValueError("not a list")
    words = tuple(_as_text(word) for word in raw)
    if not all(isinstance(word, str) and word for word in words):
        raise ValueError("not a list of strings")
    return words


def _project_path(text: Any) -> str:
    """A path inside the project directory, as POSIX text without '.', '..' or a trailing '/'."""
    if not isinstance(text, str) or not text.strip() or "\\" in text or "\n" in text:
        raise ValueError("not a relative path")
    path = PurePosixPath(text)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError("not inside the project")
    return path.as_posix()


ProjectPath = Annotated[
    str,
    PlainValidator(_project_path),
    Allowed(
        "expected a path relative to the project directory, such as trainer or "
        "examples/digits (not absolute, no '..')"
    ),
]
Command = Annotated[
    tuple[str, ...],
    PlainValidator(_command),
    Allowed("expected a list of strings, such as [train.py, --epochs, '10'] (not one string)"),
]
EnvMap = Annotated[
    Mapping[str, str],
    PlainValidator(_env),
    Allowed("expected an object of variable names to plain values"),
]
SecretEnvMap = Annotated[
    Mapping[str, Any],
    PlainValidator(_secret_env),
    Allowed("expected an object of variable names to secrets (pulumi config set --secret --path)"),
]
BuildArgs = Annotated[
    Mapping[str, str],
    PlainValidator(_build_args),
    Allowed("expected an object of build argument names to strings"),
]
NodeSelector = Annotated[
    Mapping[str, str],
    PlainValidator(_node_selector),
    Allowed("expected an object of node label names to strings"),
]
PodLabels = Annotated[
    Mapping[str, str],
    PlainValidator(_node_selector),
    Allowed("expected an object of pod label names to strings"),
]


def _ip_block(value: Any) -> Any:
    """An address block as Kubernetes' ipBlock takes it, in its network form: `10.0.0.1/8`
    (host bits set) most likely means a mistake, and would select what `10.0.0.0/8` does."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    try:
        return str(ipaddress.ip_network(value.strip(), strict=True))
    except ValueError:
        raise ValueError("not a CIDR block") from None


IpBlock = Annotated[
    str,
    PlainValidator(_ip_block),
    Allowed(
        "expected an address block in CIDR notation with no host bits set, such as "
        "10.96.0.0/12, 192.0.2.10/32 or 2001:db8::/32"
    ),
]
# An item of a list of ports, whose key says what is allowed (`Ports`).
Port = Annotated[int, BeforeValidator(_integer), Field(ge=1, le=65535)]
Ports = Annotated[tuple[Port, ...], Allowed("expected a list of port numbers, each 1 to 65535")]
# The namespaces a list of them names (`metrics.scrapeFrom`): at least one, as an empty list of
# sources in a NetworkPolicy rule would admit every source.
Namespaces = Annotated[
    tuple[DnsLabel, ...],
    Field(min_length=1),
    Allowed("expected a list of namespace names (DNS-1123 labels), at least one"),
]
# Prometheus' duration (its model.ParseDuration, the Prometheus Operator's `Duration`): whole
# numbers of y, w, d, h, m, s and ms, each unit at most once, the largest first.
_PROMETHEUS_DURATION = re.compile(
    r"^(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?"
    r"(?:([0-9]+)ms)?\Z"
)


def _prometheus_duration(value: Any) -> Any:
    """A scrape interval: a Prometheus duration longer than 0 ("0s" would be no interval)."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    match = _PROMETHEUS_DURATION.match(value)
    if match is None or not any(int(part) for part in match.groups() if part is not None):
        raise ValueError("not a Prometheus duration")
    return value


PrometheusDuration = Annotated[
    str,
    PlainValidator(_prometheus_duration),
    Allowed(
        "expected a Prometheus duration longer than 0, such as 15s, 1m or 1m30s (whole numbers "
        "of y, w, d, h, m, s, ms, the largest unit first, each once)"
    ),
]
LabelKey = _matching(
    r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z",
    "expected a taint key: [prefix/]name, name up to 63 characters of [A-Za-z0-9-_.] starting "
    "and ending alphanumeric, prefix a DNS subdomain",
)
LabelValue = Annotated[
    str,
    BeforeValidator(_as_text),
    StringConstraints(pattern=_LABEL_VALUE.pattern),
    Allowed(
        "expected a label value: up to 63 characters of [A-Za-z0-9-_.], empty or starting and "
        "ending alphanumeric"
    ),
]
# A device plugin's extended resource: `<vendor domain>/<name>` (kubernetes.io and requests.
# are Kubernetes' own prefixes, never a device's).
ExtendedResource = _matching(
    r"^(?!kubernetes\.io/|requests\.)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+"
    r"/[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z",
    "expected a device plugin's resource name, <vendor domain>/<name>, such as nvidia.com/gpu, "
    "nvidia.com/mig-1g.10gb or amd.com/gpu",
)


# S3's bucket naming rules (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html),
# which the S3-compatible services follow: what a bucket may be called anywhere.
S3Bucket = _matching(
    r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z",
    "expected an S3 bucket name: 3-63 characters of lowercase letters, digits, '.' and '-', "
    "starting and ending with a letter or digit",
    63,
)
# Keys are joined with '/' under the bucket: a leading, trailing or doubled '/' would make keys
# other tools (the console, `aws s3 ls`) show as empty folders, and '.'/'..' parts as paths.
S3Prefix = _matching(
    r"^(?!\.\.?(/|\Z))[^/\s]+(/(?!\.\.?(/|\Z))[^/\s]+)*\Z",
    "expected a key prefix such as runs/team-a: parts separated by single '/', no leading or "
    "trailing '/', no '.' or '..' part, no whitespace",
    512,
)
# A URL with user:password@ would put a credential in the pods' plain environment: refused.
S3Endpoint = _matching(
    r"^https?://[^\s/?#@]+(/[^\s?#]*)?\Z",
    "expected the http:// or https:// URL of an S3-compatible service (MinIO, Ceph RGW, GCS's "
    "XML API https://storage.googleapis.com, CoreWeave...), such as https://minio.example.com:9000,"
    " without credentials in it",
)
S3Region = _matching(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z",
    "expected a region name such as us-east-1 (lowercase letters, digits and '-')",
    63,
)


# A secret pulumi.Output[str] in the program, a plain str (or REDACTED, or None) offline: never
# validated, shown or serialised, and never read from the registry object (stack.py's
# parse_settings).
Secret = Annotated[Any, SkipValidation, Allowed("a secret: pulumi config set --secret")]
# The same inside an object (checkpoints' credentials): settings/stack.py refuses a value
# that is not one (is_secret_value), naming the key but never echoing the value.
PathSecret = Annotated[
    Any,
    SkipValidation,
    Allowed("a secret of the stack's config: pulumi config set --secret --path"),
]


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
