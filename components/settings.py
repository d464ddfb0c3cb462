"""Every stack setting, read and validated once, into frozen dataclasses.

Why one module: the Pulumi program, the offline renderer and the local runner must agree on what
a stack means, and a bad value must stop `pulumi up` before a single resource is registered. So
all parsing lives here, is pure (plain mappings in, dataclasses out) and raises `SettingsError`
naming the key, the value and what is allowed. Only `load_settings` touches the Pulumi runtime.

Numbers and booleans inside the structured objects may be YAML numbers/booleans or their string
spelling ("3", "true"), because `pulumi config set --path job.nodes 3` stores strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

PROJECT = "pytorch-distributed"
REPO_ROOT = Path(__file__).resolve().parent.parent
REDACTED = "<redacted>"

PLATFORMS = ("kubeflow", "runai")
IMAGE_PLATFORMS = ("linux/amd64", "linux/arm64")
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
WAIT_FOR = ("none", "created", "running")
CLEAN_POD_POLICIES = ("None", "Running", "All")
DEFAULT_BASE_IMAGE = "nvcr.io/nvidia/pytorch:24.07-py3"
PASSWORD_KEY = "registryPassword"
OBJECT_KEYS = ("image", "registry", "checkpoints", "job")
TOP_LEVEL_KEYS = (
    "platform",
    "namespace",
    "runaiProject",
    "kubeContext",
    "labels",
    *OBJECT_KEYS,
)

# The operator names pods `<job>-worker-<index>` and creates a Service per replica; both must stay
# DNS-1035 labels (63 characters), so the job name leaves room for the longest suffix.
JOB_NAME_MAX = 48
MAX_NODES = 1000
MAX_GPUS_PER_NODE = 16

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)
# Kubernetes resource.Quantity: a decimal number, then a binary (Ki..Ei) or decimal (n..E)
# suffix or an exponent. "10TB" is the classic mistake this rejects.
_QUANTITY = re.compile(
    r"^(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?\Z"
)
_QUANTITY_FACTORS = {
    None: Decimal(1),
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# Docker reference grammar, reduced to what we need: optional registry host[:port], lowercase
# path components, then an optional :tag and/or @sha256:<64 hex> digest.
_HOST_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_REGISTRY_HOST = rf"(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*(?::[0-9]+)?)"
_PATH_COMPONENT = r"(?:[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)"
_REPOSITORY_RE = rf"(?:{_REGISTRY_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG_RE = r"[\w][\w.-]{0,127}"
_DIGEST_RE = r"sha256:[0-9a-f]{64}"
_REPOSITORY = re.compile(rf"^{_REPOSITORY_RE}\Z")
_IMAGE_REF = re.compile(rf"^{_REPOSITORY_RE}(?::{_TAG_RE})?(?:@{_DIGEST_RE})?\Z")
_PINNED_REF = re.compile(rf"^{_REPOSITORY_RE}(?::{_TAG_RE})?@{_DIGEST_RE}\Z")
_SERVER = re.compile(rf"^(?:https?://)?{_REGISTRY_HOST}(?:/[\w./-]*)?\Z")
_TASK = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*\Z")

_ALLOWED_KEYS: dict[str, tuple[str, ...]] = {
    "image": ("build", "repository", "baseImage", "platform", "ref"),
    "registry": ("server", "username"),
    "checkpoints": (
        "size",
        "storageClass",
        "accessMode",
        "mountPath",
        "retainOnDestroy",
        "existingClaim",
    ),
    "job": (
        "name",
        "nodes",
        "gpusPerNode",
        "batchSize",
        "totalEpochs",
        "saveEvery",
        "datasetSize",
        "task",
        "initFrom",
        "maxRestarts",
        "backoffLimit",
        "cpu",
        "memory",
        "waitFor",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "cleanPodPolicy",
    ),
}


class SettingsError(ValueError):
    """A config value is invalid; the message names the key, the value and what is allowed."""


@dataclass(frozen=True)
class ImageSettings:
    build: bool
    repository: str | None
    base_image: str
    platform: str
    ref: str | None

    @property
    def pinned(self) -> bool:
        """True when `ref` names an immutable digest (the policy pack insists on it for prod)."""
        return self.ref is not None and _PINNED_REF.match(self.ref) is not None


@dataclass(frozen=True)
class RegistrySettings:
    server: str
    username: str
    # A secret pulumi.Output[str] in the program; a plain str (or REDACTED, or None) offline.
    password: Any


@dataclass(frozen=True)
class CheckpointSettings:
    size: str
    storage_class: str | None
    access_mode: str
    mount_path: str
    retain_on_destroy: bool
    existing_claim: str | None


@dataclass(frozen=True)
class JobSettings:
    name: str
    nodes: int
    gpus_per_node: int
    batch_size: int
    total_epochs: int
    save_every: int
    dataset_size: int
    task: str | None
    max_restarts: int
    backoff_limit: int
    cpu: str
    memory: str
    wait_for: str
    ttl_seconds_after_finished: int | None
    active_deadline_seconds: int | None
    clean_pod_policy: str
    # A checkpoint file or directory on the claim whose weights seed this (new) job.
    init_from: str | None = None

    @property
    def workers(self) -> int:
        """The master trains too, so a run on N nodes has N - 1 workers."""
        return self.nodes - 1

    @property
    def nproc_per_node(self) -> int:
        """One process per GPU; a CPU (gloo) pod still runs one process."""
        return max(self.gpus_per_node, 1)


@dataclass(frozen=True)
class StackSettings:
    platform: str
    namespace: str
    runai_project: str | None
    kube_context: str | None
    labels: Mapping[str, str]
    image: ImageSettings
    registry: RegistrySettings | None
    checkpoints: CheckpointSettings
    job: JobSettings

    @property
    def checkpoint_dir(self) -> str:
        """Each job gets its own directory on the shared claim, so runs never mix snapshots."""
        return f"{self.checkpoints.mount_path}/{self.job.name}"


def quantity_value(text: str) -> Decimal:
    """The numeric value of a Kubernetes quantity ("500m" -> 0.5, "1Gi" -> 1073741824)."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return Decimal(match["number"]) * _quantity_factor(match["suffix"])


def _quantity_factor(suffix: str | None) -> Decimal:
    if suffix is not None and suffix[0] in "eE" and len(suffix) > 1:
        return Decimal(10) ** int(suffix[1:])
    return _QUANTITY_FACTORS[suffix]


def _fail(key: str, value: Any, allowed: str) -> SettingsError:
    if value is None:
        return SettingsError(f"missing config {PROJECT}:{key}: {allowed}")
    return SettingsError(f"invalid config {PROJECT}:{key} = {value!r}: {allowed}")


class _Section:
    """Reads one structured-config object, remembering which keys were consumed."""

    def __init__(self, name: str, raw: Any) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise _fail(name, raw, f"expected an object with keys {', '.join(_ALLOWED_KEYS[name])}")
        unknown = sorted(set(raw) - set(_ALLOWED_KEYS[name]))
        if unknown:
            key = f"{name}.{unknown[0]}"
            raise _fail(
                key,
                raw[unknown[0]],
                f"unknown key; {name} accepts {', '.join(_ALLOWED_KEYS[name])}",
            )
        self.name = name
        self.raw = raw

    def key(self, field: str) -> str:
        return f"{self.name}.{field}"

    def string(self, field: str, default: str | None = None) -> str | None:
        value = self.raw.get(field)
        if value is None:
            return default
        if not isinstance(value, str) or not value.strip():
            raise _fail(self.key(field), value, "expected a non-empty string")
        return value

    def integer(
        self, field: str, default: int | None, minimum: int, maximum: int | None = None
    ) -> int | None:
        value = self.raw.get(field)
        if value is None:
            return default
        allowed = f"expected an integer >= {minimum}" + (
            f" and <= {maximum}" if maximum is not None else ""
        )
        number: int
        if isinstance(value, bool):
            raise _fail(self.key(field), value, allowed)
        if isinstance(value, int):
            number = value
        elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            number = int(value)
        else:
            raise _fail(self.key(field), value, allowed)
        if number < minimum or (maximum is not None and number > maximum):
            raise _fail(self.key(field), value, allowed)
        return number

    def boolean(self, field: str, default: bool) -> bool:
        value = self.raw.get(field)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise _fail(self.key(field), value, "expected true or false")

    def choice(self, field: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.raw.get(field)
        if value is None:
            value = default
        if value not in choices:
            raise _fail(self.key(field), value, f"expected one of {', '.join(choices)}")
        return value

    def matching(
        self, field: str, default: str | None, pattern: re.Pattern[str], allowed: str
    ) -> str | None:
        value = self.raw.get(field)
        if value is None:
            return default
        if not isinstance(value, str) or pattern.match(value) is None:
            raise _fail(self.key(field), value, allowed)
        return value

    def quantity(self, field: str, default: str) -> str:
        value = self.raw.get(field)
        if value is None:
            value = default
        # YAML reads `cpu: 2` or `cpu: 0.5` as numbers; Kubernetes accepts their plain spelling.
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = _number_text(value)
        allowed = (
            "expected a positive Kubernetes quantity such as 500m, 2, 16Gi or 10Ti "
            "(binary suffixes Ki/Mi/Gi/Ti/Pi/Ei, decimal k/M/G/T/P/E; not 'GB'/'TB')"
        )
        if not isinstance(value, str) or _QUANTITY.match(value) is None:
            raise _fail(self.key(field), value, allowed)
        try:
            positive = quantity_value(value) > 0
        except InvalidOperation:
            positive = False
        if not positive:
            raise _fail(self.key(field), value, allowed)
        return value


def _number_text(number: float) -> str:
    """2 -> "2", 0.5 -> "0.5" (never "5e-01", which would mean something else to Kubernetes)."""
    if isinstance(number, int):
        return str(number)
    return format(Decimal(repr(number)), "f")


def _top_string(values: Mapping[str, Any], key: str) -> str | None:
    value = values.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _fail(key, value, "expected a non-empty string")
    return value


def _dns_label(key: str, value: str | None, max_length: int = 63) -> str | None:
    if value is not None and (len(value) > max_length or _DNS1123_LABEL.match(value) is None):
        raise _fail(
            key,
            value,
            f"expected a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit, at most {max_length} characters",
        )
    return value


def _parse_image(section: _Section) -> ImageSettings:
    build = section.boolean("build", True)
    repository = section.matching(
        "repository",
        None,
        _REPOSITORY,
        "expected an image repository without tag, e.g. registry.example.com/team/trainer",
    )
    base_image = section.matching(
        "baseImage",
        DEFAULT_BASE_IMAGE,
        _IMAGE_REF,
        "expected an image reference such as nvcr.io/nvidia/pytorch:24.07-py3",
    )
    platform = section.choice("platform", "linux/amd64", IMAGE_PLATFORMS)
    ref = section.matching(
        "ref",
        None,
        _IMAGE_REF,
        "expected an image reference, repo@sha256:<64 hex> (pinned, preferred) or repo:tag",
    )
    if build and repository is None:
        raise _fail(
            section.key("repository"),
            None,
            "required when image.build is true (where the built image is pushed)",
        )
    if not build and ref is None:
        raise _fail(
            section.key("ref"), None, "required when image.build is false (the prebuilt image)"
        )
    if build and ref is not None:
        raise _fail(
            section.key("ref"),
            ref,
            "only allowed with image.build: false (a built image is referenced by its digest)",
        )
    assert base_image is not None
    return ImageSettings(
        build=build, repository=repository, base_image=base_image, platform=platform, ref=ref
    )


def _repository_host(repository: str) -> str | None:
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def _server_host(server: str) -> str:
    return re.sub(r"^https?://", "", server).split("/", 1)[0]


def _parse_registry(raw: Any, password: Any, image: ImageSettings) -> RegistrySettings | None:
    if raw is None:
        if password is not None:
            raise _fail(
                PASSWORD_KEY,
                REDACTED,
                "a registry password needs the registry object (registry.server and "
                "registry.username); set them or remove the password",
            )
        return None
    section = _Section("registry", raw)
    server = section.matching(
        "server", None, _SERVER, "expected a registry host such as registry.example.com[:port]"
    )
    username = section.string("username")
    if server is None:
        raise _fail(section.key("server"), None, "required when registry is set")
    if username is None:
        raise _fail(section.key("username"), None, "required when registry is set")
    if image.build and image.repository is not None:
        host = _repository_host(image.repository)
        if host is not None and host != _server_host(server):
            raise _fail(
                section.key("server"),
                server,
                f"must be the registry image.repository pushes to ({host})",
            )
    return RegistrySettings(server=server, username=username, password=password)


def _parse_checkpoints(section: _Section) -> CheckpointSettings:
    size = section.quantity("size", "10Ti")
    storage_class = section.matching(
        "storageClass",
        None,
        _DNS1123_SUBDOMAIN,
        "expected a StorageClass name (DNS-1123 subdomain: lowercase letters, digits, '-', '.')",
    )
    access_mode = section.choice("accessMode", "ReadWriteMany", ACCESS_MODES)
    mount_path = section.string("mountPath", "/checkpoints")
    assert mount_path is not None
    parts = mount_path.split("/")
    if (
        not mount_path.startswith("/")
        or mount_path == "/"
        or mount_path.endswith("/")
        or any(part in ("", ".", "..") for part in parts[1:])
        or ":" in mount_path
        or mount_path == "/dev/shm"
        or mount_path.startswith("/opt/pytorch-distributed")
    ):
        raise _fail(
            section.key("mountPath"),
            mount_path,
            "expected an absolute directory such as /checkpoints (no trailing '/', '..', ':', "
            "and not /, /dev/shm or the image's /opt/pytorch-distributed)",
        )
    retain = section.boolean("retainOnDestroy", True)
    existing = section.matching(
        "existingClaim",
        None,
        _DNS1123_SUBDOMAIN,
        "expected a PersistentVolumeClaim name (DNS-1123 subdomain)",
    )
    if existing is not None and len(existing) > 253:
        raise _fail(section.key("existingClaim"), existing, "at most 253 characters")
    return CheckpointSettings(
        size=size,
        storage_class=storage_class,
        access_mode=access_mode,
        mount_path=mount_path,
        retain_on_destroy=retain,
        existing_claim=existing,
    )


def _parse_job(section: _Section) -> JobSettings:
    name = section.string("name", "pytorch-ddp")
    assert name is not None
    if len(name) > JOB_NAME_MAX or _DNS1035_LABEL.match(name) is None:
        raise _fail(
            section.key("name"),
            name,
            f"expected a DNS-1035 label (lowercase letters, digits and '-', starting with a "
            f"letter) of at most {JOB_NAME_MAX} characters, so the operator's pod and "
            f"service names stay valid",
        )
    nodes = section.integer("nodes", 2, 1, MAX_NODES)
    gpus = section.integer("gpusPerNode", 1, 0, MAX_GPUS_PER_NODE)
    batch_size = section.integer("batchSize", 32, 1)
    total_epochs = section.integer("totalEpochs", 100, 1)
    save_every = section.integer("saveEvery", 25, 1)
    dataset_size = section.integer("datasetSize", 2048, 1)
    assert nodes is not None and gpus is not None and batch_size is not None
    assert total_epochs is not None and save_every is not None and dataset_size is not None
    if save_every > total_epochs:
        raise _fail(
            section.key("saveEvery"),
            save_every,
            f"expected at most job.totalEpochs ({total_epochs}), or no checkpoint is ever saved",
        )
    task = section.matching(
        "task", None, _TASK, "expected MODULE:FUNCTION, e.g. trainer.tasks:regression"
    )
    max_restarts = section.integer("maxRestarts", 0, 0, 100)
    backoff_limit = section.integer("backoffLimit", 3, 0, 100)
    assert max_restarts is not None and backoff_limit is not None
    cpu = section.quantity("cpu", "4")
    memory = section.quantity("memory", "16Gi")
    wait_for = section.choice("waitFor", "created", WAIT_FOR)
    ttl = section.integer("ttlSecondsAfterFinished", None, 0)
    deadline = section.integer("activeDeadlineSeconds", None, 1)
    clean_pod_policy = section.choice("cleanPodPolicy", "None", CLEAN_POD_POLICIES)
    init_from = section.string("initFrom", None)
    return JobSettings(
        name=name,
        nodes=nodes,
        gpus_per_node=gpus,
        batch_size=batch_size,
        total_epochs=total_epochs,
        save_every=save_every,
        dataset_size=dataset_size,
        task=task,
        max_restarts=max_restarts,
        backoff_limit=backoff_limit,
        cpu=cpu,
        memory=memory,
        wait_for=wait_for,
        ttl_seconds_after_finished=ttl,
        active_deadline_seconds=deadline,
        clean_pod_policy=clean_pod_policy,
        init_from=init_from,
    )


def _parse_labels(raw: Any) -> Mapping[str, str]:
    """Extra labels (team, cost center) on the stack's objects: metadata only, so changing them
    updates the objects in place and never replaces the job."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise _fail("labels", raw, "expected an object of label names to strings") from None
    if not isinstance(raw, Mapping):
        raise _fail("labels", raw, "expected an object of label names to strings")
    labels: dict[str, str] = {}
    for name, value in raw.items():
        prefix, _, label = str(name).rpartition("/")
        if (prefix and not (_DNS1123_SUBDOMAIN.match(prefix) and len(prefix) <= 253)) or not (
            _LABEL_VALUE.match(label) and label
        ):
            raise _fail(
                f"labels.{name}",
                value,
                "label names are [prefix/]name: name up to 63 characters of [A-Za-z0-9-_.] "
                "starting and ending alphanumeric, prefix a DNS subdomain",
            )
        if prefix == "app.kubernetes.io":
            raise _fail(f"labels.{name}", value, "app.kubernetes.io/* labels are the stack's own")
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            raise _fail(
                f"labels.{name}",
                value,
                "a label value is a string of up to 63 characters of [A-Za-z0-9-_.], "
                "empty or starting and ending alphanumeric",
            )
        labels[str(name)] = value
    return labels


def _check_init_from(job: JobSettings, checkpoints: CheckpointSettings) -> None:
    """job.initFrom must be a path on the claim (the only storage the pods share), and not this
    job's own checkpoint directory: a warm start is a new run with a directory of its own."""
    value = job.init_from
    if value is None:
        return
    mount = checkpoints.mount_path
    own = f"{mount}/{job.name}"
    parts = value.split("/")
    if not value.startswith(mount + "/") or any(part in ("", ".", "..") for part in parts[1:]):
        raise _fail(
            "job.initFrom",
            value,
            f"expected a checkpoint directory or file on the claim, under {mount}/ "
            f"(e.g. {mount}/<previous job.name>), without '..' or a trailing '/'",
        )
    if value == own or value.startswith(own + "/"):
        raise _fail(
            "job.initFrom",
            value,
            f"this is the job's own checkpoint directory {own}; a warm start writes a new run: "
            "give the job a new job.name and point job.initFrom at the old one",
        )


def parse_settings(values: Mapping[str, Any], *, password: Any = None) -> StackSettings:
    """Validate config `values` (keys without the project prefix) into StackSettings.

    `password` is the `registryPassword` secret, passed separately because the program holds it
    as a secret Output and the offline tools hold REDACTED or nothing.
    """
    if PASSWORD_KEY in values:
        raise _fail(
            PASSWORD_KEY,
            REDACTED,
            "pass the registry password separately (parse_settings(password=...))",
        )
    unknown = sorted(set(values) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise _fail(
            unknown[0],
            values[unknown[0]],
            f"unknown key; allowed keys are {', '.join((*TOP_LEVEL_KEYS, PASSWORD_KEY))}",
        )
    platform = values.get("platform", "kubeflow")
    if platform not in PLATFORMS:
        raise _fail("platform", platform, f"expected one of {', '.join(PLATFORMS)}")
    runai_project = _dns_label("runaiProject", _top_string(values, "runaiProject"), 57)
    if platform == "runai" and runai_project is None:
        raise _fail(
            "runaiProject", None, "required when platform is runai (the Run:ai project name)"
        )
    if platform != "runai" and runai_project is not None:
        raise _fail("runaiProject", runai_project, "only allowed when platform is runai")
    default_namespace = f"runai-{runai_project}" if platform == "runai" else "default"
    namespace = _dns_label("namespace", _top_string(values, "namespace")) or default_namespace
    kube_context = _top_string(values, "kubeContext")
    labels = _parse_labels(values.get("labels"))

    image = _parse_image(_Section("image", values.get("image")))
    registry = _parse_registry(values.get("registry"), password, image)
    checkpoints = _parse_checkpoints(_Section("checkpoints", values.get("checkpoints")))
    job = _parse_job(_Section("job", values.get("job")))
    if checkpoints.access_mode == "ReadWriteOncePod" and job.nodes > 1:
        raise _fail(
            "checkpoints.accessMode",
            checkpoints.access_mode,
            f"ReadWriteOncePod lets one pod mount the claim but job.nodes is {job.nodes}; "
            "use ReadWriteMany (or ReadWriteOnce, which co-locates the pods on one node)",
        )
    _check_init_from(job, checkpoints)
    return StackSettings(
        platform=platform,
        namespace=namespace,
        runai_project=runai_project,
        kube_context=kube_context,
        labels=labels,
        image=image,
        registry=registry,
        checkpoints=checkpoints,
        job=job,
    )


def _project_values(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Strip the project prefix and decode structured (JSON) objects; other namespaces pass."""
    values: dict[str, Any] = {}
    for full_key, value in config.items():
        namespace, sep, key = str(full_key).partition(":")
        if not sep:
            namespace, key = PROJECT, namespace
        if namespace != PROJECT:
            continue
        if key in OBJECT_KEYS and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise _fail(key, value, f"expected an object ({source})") from None
        values[key] = value
    return values


def load_stack_file(stack: str, root: Path = REPO_ROOT) -> StackSettings:
    """Read and validate `Pulumi.<stack>.yaml` offline; secure values become REDACTED."""
    import yaml

    path = Path(root) / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise SettingsError(f"stack file {path} does not exist (stack {stack!r})")
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    config = document.get("config") or {}
    if not isinstance(config, Mapping):
        raise SettingsError(f"{path}: 'config' must be a mapping")
    values = _project_values(config, str(path))
    password = values.pop(PASSWORD_KEY, None)
    if password is not None:
        password = REDACTED
    for key, value in list(values.items()):
        if isinstance(value, Mapping) and set(value) == {"secure"}:
            values[key] = REDACTED
    return parse_settings(values, password=password)


def _runtime_config() -> dict[str, Any]:
    """The whole config map the engine handed this program (set_all_config and PULUMI_CONFIG)."""
    import pulumi.runtime.config as runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return merged


def load_settings() -> StackSettings:
    """Settings of the running Pulumi program; any invalid value is one clean RunError line."""
    import pulumi

    config = pulumi.Config(PROJECT)
    try:
        values = _project_values(_runtime_config(), "stack config")
        values.pop(PASSWORD_KEY, None)
        password = config.get_secret(PASSWORD_KEY)
        settings = parse_settings(values, password=password)
        if settings.registry is not None and password is None:
            raise _fail(
                PASSWORD_KEY,
                None,
                "required when registry is set: pulumi config set --secret registryPassword",
            )
    except SettingsError as error:
        raise pulumi.RunError(str(error)) from None
    return settings
