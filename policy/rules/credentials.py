"""Registry credentials live only in a dockerconfigjson Secret; nothing else holds a credential.

Secret values reach a policy decrypted (pulumi-policy unwraps the engine's secret markers before
`validate` runs), so a policy cannot tell an encrypted value from a plain one. The rule therefore
judges where a credential sits: only the fields whose provider schema stores them as Pulumi
secrets may hold one (ALLOWED_FIELDS); a credential-shaped value anywhere else (an env var, an
argument, a label, a ConfigMap) is stored and shown in plain text and is a violation.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from .jobs import JobView, job_view
from .model import (
    DOCKERCONFIGJSON,
    SECRET_TYPE,
    Resource,
    Violation,
    as_list,
    dig,
    find_named,
    is_unknown,
    metadata_name,
    metadata_namespace,
)

DOCKER_CONFIG_KEYS: Final = (".dockerconfigjson", ".dockercfg")

# Fields the providers mark secret, so Pulumi encrypts them in state and masks them in diffs.
ALLOWED_FIELDS: Final[Mapping[str, tuple[tuple[str, ...], ...]]] = {
    SECRET_TYPE: (("data",), ("stringData",)),
    "docker:index/image:Image": (("registry", "password"),),
    "pulumi:providers:docker": (("registryAuth",),),
    "pulumi:providers:kubernetes": (("kubeconfig",),),
}

_CREDENTIAL_WORDS: Final = (
    "password",
    "passwd",
    "token",
    "apikey",
    "secretkey",
    "accesskey",
    "clientsecret",
    "privatekey",
    "credentials",
)
_EXACT_CREDENTIAL_NAMES: Final = ("auth", "secret", "pwd")
_CREDENTIAL_PATTERNS: Final = (
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{20,})")),
    ("an AWS access key id", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("an NVIDIA NGC API key", re.compile(r"\bnvapi-[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("a password in a URL", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.I)),
)
_CREDENTIAL_FLAG: Final = re.compile(
    r"^--?(password|passwd|token|api[-_]?key|secret|access[-_]?key)(=(?P<value>.*))?$", re.I
)


# An environment variable is a credential when one of its words is one of these (HF_TOKEN,
# WANDB_API_KEY, DB_PASSWORD, AWS_SECRET_ACCESS_KEY): a word, so TOKENIZERS_PARALLELISM or
# KEYBOARD_LAYOUT are not.
_CREDENTIAL_ENV_WORDS: Final = ("TOKEN", "KEY", "PASSWORD", "PASSWD", "SECRET")


def is_credential_name(name: str) -> bool:
    normalized = re.sub(r"[^a-z0-9]", "", name.lower())
    return normalized in _EXACT_CREDENTIAL_NAMES or normalized.endswith(_CREDENTIAL_WORDS)


def is_credential_env_name(name: str) -> bool:
    """An environment variable's name that says it holds a credential (*TOKEN*, *KEY*,
    *PASSWORD*, *SECRET*, as words of the name, or a credential word at its end: APIKEY)."""
    words = re.split(r"[^A-Z0-9]+", name.upper())
    return any(word in _CREDENTIAL_ENV_WORDS for word in words) or is_credential_name(name)


def no_plaintext_credentials(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    allowed = ALLOWED_FIELDS.get(resource_type, ())
    messages: list[str] = []
    for path, key, value in _string_leaves(props, ()):
        if any(path[: len(prefix)] == prefix for prefix in allowed):
            continue
        dotted = _dotted(path)
        if key is not None and is_credential_name(key) and value.strip():
            messages.append(f"{dotted} holds a literal credential; keep it in a Secret")
            continue
        found = _credential_in_text(value)
        if found:
            messages.append(f"{dotted} contains {found}; keep it in a Secret")
    view = job_view(resource_type)
    if view is not None:
        messages.extend(_env_messages(view, props))
    messages.extend(_argument_messages(props))
    return messages


def _credential_in_text(value: str) -> str | None:
    for label, pattern in _CREDENTIAL_PATTERNS:
        if pattern.search(value):
            return label
    if '"auths"' in value and _docker_config_auths(value) is not None:
        return "a docker registry config"
    return None


def _string_leaves(
    value: Any, path: tuple[str, ...], key: str | None = None
) -> Iterator[tuple[tuple[str, ...], str | None, str]]:
    if isinstance(value, Mapping):
        for child_key, child in value.items():
            yield from _string_leaves(child, (*path, str(child_key)), str(child_key))
    elif isinstance(value, list | tuple):
        for index, child in enumerate(value):
            yield from _string_leaves(child, (*path, f"[{index}]"))
    elif isinstance(value, str):
        yield path, key, value


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".[", "[")


def _env_messages(view: JobView, props: Mapping[str, Any]) -> list[str]:
    """`env: [{name: HF_TOKEN, value: ...}]` has no credential-named dict key, so look by name:
    a plain value (the stack's job.env) under a credential's name is refused, whatever it is."""
    messages: list[str] = []
    for container in view.containers(props, True):
        for env_index, env in enumerate(as_list(dig(container.spec, "env"))):
            name, value = dig(env, "name"), dig(env, "value")
            literal = isinstance(value, str) and bool(value.strip())
            if isinstance(name, str) and is_credential_env_name(name) and literal:
                messages.append(
                    f"{container.field_path('env')}[{env_index}] ({name}) has a plain value "
                    "but its name says it is a credential; use valueFrom.secretKeyRef (the "
                    f"stack's job.secretEnv.{name}, not job.env)"
                )
    return messages


def _argument_messages(props: Mapping[str, Any]) -> list[str]:
    """`--password hunter2` / `--token=abc` in any string list (command, args)."""
    messages: list[str] = []
    for path, items in _string_lists(props, ()):
        for index, item in enumerate(items):
            match = _CREDENTIAL_FLAG.match(item) if isinstance(item, str) else None
            if match is None:
                continue
            inline = match.group("value")
            following = items[index + 1] if index + 1 < len(items) else None
            literal = inline or (
                following if isinstance(following, str) and not following.startswith("-") else None
            )
            if literal and not literal.startswith("$("):
                messages.append(
                    f"{_dotted(path)}[{index}] passes {match.group(1)!r} on the command line; "
                    "read it from a Secret-backed env var or file"
                )
    return messages


def _string_lists(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], list[Any]]]:
    if isinstance(value, Mapping):
        for key, child in value.items():
            yield from _string_lists(child, (*path, str(key)))
    elif isinstance(value, list | tuple):
        if any(isinstance(item, str) for item in value):
            yield path, list(value)
        for index, child in enumerate(value):
            yield from _string_lists(child, (*path, f"[{index}]"))


def _docker_config_auths(text: str) -> Mapping[str, Any] | None:
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    auths = parsed.get("auths") if isinstance(parsed, dict) else None
    return auths if isinstance(auths, Mapping) else None


def registry_secret_type(resources: Iterable[Resource]) -> list[Violation]:
    """Registry credentials are Secrets of type kubernetes.io/dockerconfigjson: the only type
    the kubelet reads for image pulls and the API server checks for shape."""
    resources = list(resources)
    secrets = [r for r in resources if r.type == SECRET_TYPE]
    violations: list[Violation] = []
    for secret in secrets:
        violations.extend(
            Violation(message, secret.urn or None) for message in _secret_messages(secret.props)
        )
    for job in resources:
        view = job_view(job.type)
        if view is None:
            continue
        namespace = metadata_namespace(job.props)
        for name in sorted(_pull_secret_names(view, job.props)):
            secret = find_named(secrets, name, namespace)
            secret_type = None if secret is None else dig(secret.props, "type")
            if secret is None or is_unknown(secret_type) or secret_type == DOCKERCONFIGJSON:
                continue
            violations.append(
                Violation(
                    f"{view.kind} {metadata_name(job.props)!r} pulls with Secret {name!r} "
                    f"of type {secret_type!r}; image pull secrets must be {DOCKERCONFIGJSON}",
                    secret.urn or None,
                )
            )
    return violations


def _pull_secret_names(view: JobView, props: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for pod in view.pod_specs(props):
        for ref in as_list(pod.spec.get("imagePullSecrets")):
            name = dig(ref, "name")
            if isinstance(name, str):
                names.add(name)
    return names


def _secret_messages(props: Mapping[str, Any]) -> list[str]:
    secret_type = dig(props, "type")
    if is_unknown(secret_type):
        return []
    name = metadata_name(props)
    data = dig(props, "data") or {}
    string_data = dig(props, "stringData") or {}
    keys = {*_keys(data), *_keys(string_data)}
    holds_docker_config = any(key in keys for key in DOCKER_CONFIG_KEYS)
    if secret_type == "kubernetes.io/dockercfg":
        return [
            f"Secret {name!r} has the legacy type kubernetes.io/dockercfg; use {DOCKERCONFIGJSON}"
        ]
    if secret_type != DOCKERCONFIGJSON:
        if holds_docker_config:
            return [
                f"Secret {name!r} holds registry credentials but its type is "
                f"{secret_type!r}; use {DOCKERCONFIGJSON}"
            ]
        return []
    return _docker_config_messages(name, data, string_data)


def _keys(value: Any) -> list[str]:
    return [str(key) for key in value] if isinstance(value, Mapping) else []


def _docker_config_messages(name: Any, data: Any, string_data: Any) -> list[str]:
    text: Any
    if isinstance(string_data, Mapping) and ".dockerconfigjson" in string_data:
        text = string_data[".dockerconfigjson"]
    elif isinstance(data, Mapping) and ".dockerconfigjson" in data:
        text = data[".dockerconfigjson"]
        if isinstance(text, str):
            try:
                text = base64.b64decode(text, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return [f"Secret {name!r} data['.dockerconfigjson'] is not base64-encoded JSON"]
    else:
        return [f"Secret {name!r} of type {DOCKERCONFIGJSON} has no '.dockerconfigjson' key"]
    if is_unknown(text) or not isinstance(text, str):
        return []
    auths = _docker_config_auths(text)
    if not auths:
        return [f"Secret {name!r} '.dockerconfigjson' is not a docker config with an 'auths' map"]
    return []
