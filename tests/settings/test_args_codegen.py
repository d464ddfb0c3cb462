"""settings/args_codegen.py on its own: how a declaration's type becomes an argument's type, the
classes' names and order, and a module Python can load. Whether the committed settings/args.py is
what it writes is test_args.py's (the generator's docstring names it)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional

import pytest

from settings.args_codegen import _python_type, args_class_name, args_module_text
from settings.stack import ElasticSettings, ImageSettings, JobSettings, StackSettings


def test_class_names_drop_settings_and_the_stack_is_the_training_environment() -> None:
    assert args_class_name(ImageSettings) == "ImageArgs"
    assert args_class_name(ElasticSettings) == "ElasticArgs"
    assert args_class_name(StackSettings) == "TrainingEnvironmentArgs"


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (int, "int"),
        (int | None, "int"),
        (Optional[str], "str"),  # noqa: UP045 (the typing spelling is a Union too)
        (Annotated[int, "a bound"], "int"),
        (Literal["ddp", "fsdp"], "str"),
        (Literal[1, 2], "int"),
        (tuple[str, ...], "list[str]"),
        (dict[str, int], "dict[str, int]"),
        (Mapping[str, str], "dict[str, str]"),
        (Any, "str"),
        (ElasticSettings | None, "ElasticArgs"),
        (tuple[ElasticSettings, ...], "list[ElasticArgs]"),
        (tuple[ElasticSettings, ...] | None, "list[ElasticArgs]"),
    ],
)
def test_an_arguments_type_is_the_plain_type_the_host_understands(
    annotation: Any, expected: str
) -> None:
    assert _python_type(annotation) == expected


def test_the_module_defines_each_class_once_before_the_class_that_uses_it() -> None:
    tree = ast.parse(args_module_text())
    classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    assert len(classes) == len(set(classes))
    assert classes[-1] == "TrainingEnvironmentArgs"
    assert classes.index("ElasticArgs") < classes.index("JobArgs")
    assert classes.index("JobArgs") < classes.index("TrainingEnvironmentArgs")
    namespace: dict[str, Any] = {}
    exec(compile(tree, "args.py", "exec"), namespace)
    job_fields = namespace["JobArgs"].__annotations__
    assert {name for name in job_fields} >= {"name", "nodes", "elastic"}
    assert namespace["TrainingEnvironmentArgs"].__total__ is False
    assert JobSettings.__name__.removesuffix("Settings") + "Args" in namespace


def test_every_attribute_has_a_one_line_docstring() -> None:
    tree = ast.parse(args_module_text())
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        for index, statement in enumerate(body):
            if isinstance(statement, ast.AnnAssign):
                doc = body[index + 1]
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                assert "\n" not in doc.value.value, (node.name, statement.target)


def attribute_docs(class_name: str) -> dict[str, str]:
    [node] = [
        node
        for node in ast.parse(args_module_text()).body
        if isinstance(node, ast.ClassDef) and node.name == class_name
    ]
    docs = {}
    for statement, doc in zip(node.body, node.body[1:], strict=False):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
            docs[statement.target.id] = doc.value.value
    return docs


def test_a_list_of_objects_says_so_whether_or_not_it_may_be_left_unset() -> None:
    """job.volumes defaults to an empty list, network.egress to unset (`X | None`)."""
    assert attribute_docs("JobArgs")["volumes"].startswith("a list of objects, each `job.volumes`")
    assert attribute_docs("NetworkArgs")["egress"].startswith(
        "a list of objects, each `network.egress`"
    )
