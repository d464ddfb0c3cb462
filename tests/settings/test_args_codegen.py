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
