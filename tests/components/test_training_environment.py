"""TrainingEnvironment called by another program with its typed arguments: a bad one stops the
program with the settings' own line (the committed stacks' runs are tests/components/
test_program*.py; another program's provider and Output arguments, tests/examples/)."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from tests.pulumi_harness import run_program


@pytest.mark.parametrize("deferred", [False, True])
def test_the_component_refuses_a_bad_argument_naming_it(deferred: bool, tmp_path: Path) -> None:
    """A program's bad value stops it with the settings' line, whether the component declares
    its children at once or once an Output argument is known."""
    nodes = "pulumi.Output.from_input(0)" if deferred else "0"
    program = tmp_path / "__main__.py"
    program.write_text(
        "import pulumi\n"
        "from components.training_environment import TrainingEnvironment\n"
        "TrainingEnvironment('training', {'image': {'build': False, 'ref': 'r.example.com/t:1'},"
        f" 'job': {{'nodes': {nodes}}}}})\n",
        encoding="utf-8",
    )
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text("config: {}\n", encoding="utf-8")
    result = run_program(stack, program=program, project="another-program")
    assert isinstance(result.error, pulumi.RunError), result.error
    assert str(result.error) == (
        "TrainingEnvironment training: invalid config pytorch-distributed:job.nodes = 0: "
        "expected an integer >= 1 and <= 1000"
    )
    assert not [resource for resource in result.resources if resource.custom]
