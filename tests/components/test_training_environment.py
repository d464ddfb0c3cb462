"""TrainingEnvironment called by another program with its typed arguments: a bad one stops the
program with the settings' own line (the committed stacks' runs are tests/components/
test_program*.py; another program's provider and Output arguments, tests/examples/)."""

from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pytest

from tests.pulumi_harness import Secret, contains_secret, run_program


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


def test_s3_credentials_another_program_hands_in_plain_become_secrets(tmp_path: Path) -> None:
    """Issue 33: a program's checkpoints credentials are secret arguments (as the registry
    password is): the component holds them as secrets even when handed in plain, so the stack's
    Secret is the one place they are, and only as a secret; the job reads it by reference."""
    program = tmp_path / "__main__.py"
    program.write_text(
        "from components.training_environment import TrainingEnvironment\n"
        "TrainingEnvironment('training', {\n"
        "    'image': {'build': False, 'ref': 'r.example.com/t:1'},\n"
        "    'checkpoints': {'storage': 's3', 'bucket': 'team-ckpt',\n"
        "        'access_key_id': 'AKIAPROGRAMNOTREAL01', 'secret_access_key': 'program-secret'},\n"
        "    'job': {'name': 'run-s3'},\n"
        "})\n",
        encoding="utf-8",
    )
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text("config: {}\n", encoding="utf-8")
    result = run_program(stack, program=program, project="another-program")
    assert result.error is None, result.error
    [secret] = result.of_type("kubernetes:core/v1:Secret")
    assert secret.inputs["metadata"]["name"] == "run-s3-s3-credentials"
    assert isinstance(secret.inputs["data"], Secret)
    assert not result.of_type("kubernetes:core/v1:PersistentVolumeClaim")
    for resource in result.resources:
        for value in resource.inputs.values():
            if not contains_secret(value):
                assert "AKIAPROGRAMNOTREAL01" not in json.dumps(value)
                assert "program-secret" not in json.dumps(value)


def test_the_stacks_own_program_validates_its_config_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_args validated the stack's config and hands the component the settings it made:
    the component declares them, and validating the arguments again would be a second parse."""
    from components import training_environment

    def second_validation(*args: object, **kwargs: object) -> None:
        raise AssertionError("the stack's config was validated a second time")

    monkeypatch.setattr(training_environment, "parse_args", second_validation)
    result = run_program("dev")
    assert result.error is None, result.error
    assert result.outputs["jobName"].value == "ddp-dev"
