"""Run the real `__main__.py` under Pulumi's mocks and report what it registered.

Why a harness: the program tests and the policy tests must see exactly what `pulumi up` would ask
the engine for, from the committed stack files. So this reads `Pulumi.<stack>.yaml` the way the
CLI hands config to a Python program (objects as JSON strings, secrets marked), runs the program in
a fresh event loop and a fresh context (no state leaks between runs), and records every
RegisterResource request the engine would receive: type, name, inputs (secrets still marked) and
the resource options (retain_on_delete, replace_on_changes, ...), which the mock API alone hides.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import hashlib
import json
import logging
import runpy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.stack import run_pulumi_func

from tests.conftest import REPO_ROOT

PROJECT = "pytorch-distributed"
SECRET_SIG = rpc._special_sig_key
SECRET_VALUE = rpc._special_secret_sig


class Secret:
    """A registered input value that the engine received marked as secret."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "Secret([redacted])"


@dataclass
class RegisteredResource:
    type: str
    name: str
    custom: bool
    parent: str
    provider: str
    inputs: dict[str, Any]
    protect: bool
    retain_on_delete: bool
    delete_before_replace: bool
    replace_on_changes: list[str]
    additional_secret_outputs: list[str]
    dependencies: list[str]
    custom_timeouts: dict[str, str]
    urn: str
    # The names of the resource hooks bound to it, by step ("after_create": [...]).
    hooks: dict[str, list[str]] = field(default_factory=dict)

    def plain_inputs(self) -> dict[str, Any]:
        """The inputs with secret markers unwrapped (for schema checks; never print these)."""
        return unwrap_secrets(self.inputs)


@dataclass
class OutputValue:
    value: Any
    secret: bool
    known: bool


@dataclass
class Invoke:
    """A provider function the program called (a data source), with its arguments."""

    token: str
    args: dict[str, Any]
    provider: str


@dataclass
class ProgramResult:
    resources: list[RegisteredResource] = field(default_factory=list)
    invokes: list[Invoke] = field(default_factory=list)
    outputs: dict[str, OutputValue] = field(default_factory=dict)
    error: BaseException | None = None
    # (level name, message) of everything the program logged through pulumi.log.
    logs: list[tuple[str, str]] = field(default_factory=list)

    def of_type(self, type_token: str) -> list[RegisteredResource]:
        return [resource for resource in self.resources if resource.type == type_token]

    def one(self, type_token: str) -> RegisteredResource:
        found = self.of_type(type_token)
        assert len(found) == 1, f"expected one {type_token}, found {[r.name for r in found]}"
        return found[0]

    def named(self, name: str) -> RegisteredResource:
        [found] = [resource for resource in self.resources if resource.name == name]
        return found

    def by_urn(self, urn: str) -> RegisteredResource:
        [found] = [resource for resource in self.resources if resource.urn == urn]
        return found


def unwrap_secrets(value: Any) -> Any:
    if isinstance(value, Secret):
        return unwrap_secrets(value.value)
    if isinstance(value, dict):
        return {key: unwrap_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(item) for item in value]
    return value


def contains_secret(value: Any) -> bool:
    if isinstance(value, Secret):
        return True
    if isinstance(value, dict):
        return any(contains_secret(item) for item in value.values())
    if isinstance(value, list):
        return any(contains_secret(item) for item in value)
    return False


def plain_text(result: ProgramResult) -> list[str]:
    """Every input the engine records without a secret marker, and every stack output, as text:
    where a secret must never appear."""
    texts = [
        json.dumps(value)
        for resource in result.resources
        for value in resource.inputs.values()
        if not contains_secret(value)
    ]
    return texts + [json.dumps(output.value) for output in result.outputs.values()]


def _mark_secrets(value: Any) -> Any:
    """Turn the wire format's secret envelopes into Secret objects the tests can look for."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            return Secret(_mark_secrets(value.get("value")))
        return {key: _mark_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_mark_secrets(item) for item in value]
    return value


def _fake_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def registry_digest(image_name: str) -> str:
    """What the mocked registry answers for a pushed tag: never the engine's `repoDigest`, as
    with podman, whose RepoDigests keep the local manifest's digest after a push."""
    return _fake_digest("registry:" + image_name)


class StackMocks(pulumi.runtime.Mocks):
    """Echo inputs back as state; invent what only a real deployment knows (ids, image digests).

    In preview those deployment-only values are left out, which the SDK reports as unknown, as
    `pulumi preview` does before the image is built.
    """

    def __init__(
        self,
        preview: bool,
        other_stacks: Mapping[str, Mapping[str, Any]] | None = None,
        secret_outputs: Mapping[str, list[str]] | None = None,
    ) -> None:
        self.preview = preview
        self.invokes: list[Invoke] = []
        # What a StackReference reads: each other stack's outputs by its name, and which of
        # them that stack holds as secrets.
        self.other_stacks = other_stacks or {}
        self.secret_outputs = secret_outputs or {}

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict]:
        state = dict(args.inputs)
        if args.typ == "pulumi:pulumi:StackReference":
            stack = str(state["name"])
            state["outputs"] = dict(self.other_stacks[stack])
            state["secretOutputNames"] = list(self.secret_outputs.get(stack, []))
            return stack, state
        if args.typ == "docker:index/image:Image" and not self.preview:
            image_name = str(state["imageName"])
            repository = image_name.rsplit(":", 1)[0] if "/" in image_name else image_name
            state["repoDigest"] = f"{repository}@{_fake_digest(image_name)}"
            state["baseImageName"] = image_name
        resource_id = None if self.preview else f"{args.name}-id"
        return resource_id, state

    def call(self, args: pulumi_mocks.MockCallArgs) -> dict[str, Any]:
        # A dict, not a (result, failures) tuple: the SDK's mock monitor iterates the failures.
        self.invokes.append(Invoke(args.token, dict(args.args), args.provider))
        if args.token == "docker:index/getRegistryImage:getRegistryImage":
            name = str(args.args["name"])
            return {"name": name, "sha256Digest": registry_digest(name)}
        return {}


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, plus a record of each RegisterResource request's options."""

    def __init__(self, mocks: StackMocks) -> None:
        super().__init__(mocks)
        self.registered: list[RegisteredResource] = []

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            raw = json.loads(_struct_to_json(request.object))
            timeouts = request.customTimeouts
            self.registered.append(
                RegisteredResource(
                    type=request.type,
                    name=request.name,
                    custom=request.custom,
                    parent=request.parent,
                    provider=request.provider,
                    inputs=_mark_secrets(raw),
                    protect=bool(request.protect),
                    retain_on_delete=bool(request.retainOnDelete),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    replace_on_changes=list(request.replaceOnChanges),
                    additional_secret_outputs=list(request.additionalSecretOutputs),
                    dependencies=list(request.dependencies),
                    custom_timeouts={
                        key: getattr(timeouts, key)
                        for key in ("create", "update", "delete")
                        if getattr(timeouts, key)
                    },
                    urn=response.urn,
                    hooks=_hook_names(request.hooks),
                )
            )
        return response


def _hook_names(binding: Any) -> dict[str, list[str]]:
    return {
        descriptor.name: list(getattr(binding, descriptor.name))
        for descriptor in binding.DESCRIPTOR.fields
        if descriptor.name != "on_error" and list(getattr(binding, descriptor.name))
    }


class _LogRecorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.getMessage()))


def _struct_to_json(struct: Any) -> str:
    from google.protobuf import json_format

    return json_format.MessageToJson(struct)


def _deep_merge(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def stack_config(
    stack: str | Path,
    overrides: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    root: Path = REPO_ROOT,
    secret_paths: Mapping[str, str] | None = None,
    project: str = PROJECT,
) -> tuple[dict[str, str], list[str]]:
    """The config map and secret keys the CLI would hand the program for this stack file.

    `overrides` use keys without the project prefix and deep-merge into objects (None deletes a
    key); `secrets` are plain values the CLI would have decrypted, marked secret. `secret_paths`
    are what `pulumi config set --secret --path KEY.PATH VALUE` stores inside an object
    (`job.secretEnv.HF_TOKEN`): the CLI hands the object over decrypted and marks its whole
    top-level key secret.
    """
    path = Path(stack) if isinstance(stack, Path) else root / f"Pulumi.{stack}.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    values: dict[str, Any] = {}
    foreign: dict[str, Any] = {}
    for key, value in (document.get("config") or {}).items():
        namespace, _, short = key.partition(":")
        if namespace == project:
            values[short] = value
        else:
            foreign[key] = value
    values = _deep_merge(values, overrides or {})
    secret_keys = []
    for path, secret in (secret_paths or {}).items():
        top, *inner = path.split(".")
        nested: Any = secret
        for part in reversed(inner):
            nested = {part: nested}
        values = _deep_merge(values, {top: nested})
        secret_keys.append(f"{project}:{top}")
    config: dict[str, str] = {}
    for key, value in {**foreign, **{f"{project}:{k}": v for k, v in values.items()}}.items():
        config[key] = value if isinstance(value, str) else json.dumps(value)
    for key, value in (secrets or {}).items():
        full_key = f"{project}:{key}"
        config[full_key] = value
        secret_keys.append(full_key)
    return config, secret_keys


async def _resolve(value: Any) -> OutputValue:
    output = pulumi.Output.from_input(value)
    known = await output.is_known()
    secret = await output.is_secret()
    resolved = await output.future(with_unknowns=True) if known else None
    return OutputValue(value=resolved, secret=secret, known=known)


def run_program(
    stack: str | Path,
    overrides: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    preview: bool = False,
    program: Path = REPO_ROOT / "__main__.py",
    secret_paths: Mapping[str, str] | None = None,
    project: str = PROJECT,
    other_stacks: Mapping[str, Mapping[str, Any]] | None = None,
    secret_outputs: Mapping[str, list[str]] | None = None,
) -> ProgramResult:
    """Run `program` for `stack` under mocks; return what it registered, exported or raised.

    `project` is the program's project (another program's, examples/); `other_stacks` are the
    outputs its StackReferences read, by stack name, `secret_outputs` those held as secrets.
    """
    config, secret_keys = stack_config(
        stack, overrides, secrets, secret_paths=secret_paths, project=project
    )
    stack_name = Path(stack).stem.split(".")[-1] if isinstance(stack, Path) else stack
    mocks = StackMocks(preview, other_stacks, secret_outputs)
    # A fresh context: Pulumi keeps its config, root resource and settings in ContextVars.
    return contextvars.Context().run(
        _run_in_context, stack_name, config, secret_keys, mocks, program, project
    )


def _run_in_context(
    stack_name: str,
    config: dict[str, str],
    secret_keys: list[str],
    mocks: StackMocks,
    program: Path,
    project: str,
) -> ProgramResult:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    result = ProgramResult()
    recorder = _LogRecorder()
    logger = logging.Logger(f"pulumi-program-{stack_name}", level=logging.DEBUG)
    logger.addHandler(recorder)
    try:
        monitor = RecordingMonitor(mocks)
        pulumi.runtime.set_all_config(config, secret_keys)
        pulumi.runtime.set_mocks(
            mocks,
            project=project,
            stack=stack_name,
            preview=mocks.preview,
            monitor=monitor,
            logger=logger,
        )
        try:
            loop.run_until_complete(
                run_pulumi_func(lambda: runpy.run_path(str(program), run_name="__main__"))
            )
        except Exception as error:  # the program's own failure is a result, not a test crash
            result.error = error
        result.resources = list(monitor.registered)
        result.invokes = list(mocks.invokes)
        result.logs = list(recorder.records)
        root = pulumi.runtime.settings.get_root_resource()
        exports = dict(getattr(root, "outputs", {}) or {})
        for name, value in exports.items():
            result.outputs[name] = loop.run_until_complete(_resolve(value))
    finally:
        pulumi.runtime.settings.reset_options()
        loop.close()
        asyncio.set_event_loop(None)
    return result
