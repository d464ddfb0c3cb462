"""tools/stack_image.py: what `make image STACK=...` (scripts/build-image.sh) builds for a stack,
the same context, Dockerfile and build arguments as the stack's TrainingImage."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from settings.stack import load_stack_file
from tests.conftest import REPO_ROOT
from tools.local_backends.container import DEFAULT_IMAGE
from tools.stack_image import build_arguments, main


def test_the_trainers_stacks_build_trainer_as_the_trainer_image(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_arguments(load_stack_file("dev", REPO_ROOT)) == [
        "--file",
        "trainer/Dockerfile",
        "trainer",
    ]
    assert main(["--stack", "dev", "--name"]) == 0
    assert capsys.readouterr().out == f"{DEFAULT_IMAGE}\n"


def test_a_stack_of_your_own_code_builds_its_context_as_an_image_named_after_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = load_stack_file("digits", REPO_ROOT)
    image = dataclasses.replace(
        settings.image, build_args={"PIP_INDEX_URL": "https://pypi.example/simple"}
    )
    # BASE_IMAGE is the script's own (its stand-in for the NGC image), never repeated here.
    assert build_arguments(dataclasses.replace(settings, image=image)) == [
        *("--file", "examples/digits/Dockerfile"),
        *("--build-arg", "PIP_INDEX_URL=https://pypi.example/simple"),
        "examples/digits",
    ]
    assert main(["--stack", "digits"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "--file",
        "examples/digits/Dockerfile",
        "examples/digits",
    ]
    assert main(["--stack", "digits", "--name"]) == 0
    assert capsys.readouterr().out == "localhost/pytorch-distributed-digits:local\n"


def test_a_stack_that_cannot_be_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--stack", "nope", "--stack-dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Pulumi.nope.yaml" in err
