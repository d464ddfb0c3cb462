"""components/training_image.py: the content-derived tag of the trainer build context."""

from __future__ import annotations

from pathlib import Path

from components.training_image import context_tag


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_tag_follows_content_not_caches(tmp_path: Path) -> None:
    write(tmp_path / "Dockerfile", "FROM scratch\n")
    write(tmp_path / "loop.py", "EPOCHS = 1\n")
    first = context_tag(tmp_path)
    assert first.startswith("ctx-") and len(first) == len("ctx-") + 12
    assert context_tag(tmp_path) == first
    write(tmp_path / "__pycache__" / "loop.cpython-311.pyc", "bytecode")
    write(tmp_path / "stale.pyc", "bytecode")
    assert context_tag(tmp_path) == first
    write(tmp_path / "loop.py", "EPOCHS = 2\n")
    assert context_tag(tmp_path) != first


def test_renaming_a_file_changes_the_tag(tmp_path: Path) -> None:
    write(tmp_path / "a.py", "x = 1\n")
    before = context_tag(tmp_path)
    (tmp_path / "a.py").rename(tmp_path / "b.py")
    assert context_tag(tmp_path) != before


def test_the_dockerfile_outside_the_context_and_the_build_arguments_are_part_of_the_tag(
    tmp_path: Path,
) -> None:
    context = tmp_path / "mine"
    write(context / "train.py", "print('hi')\n")
    inside = context / "Dockerfile"
    write(inside, "FROM scratch\n")
    plain = context_tag(context)
    # The trainer's case: its Dockerfile inside its context, no arguments but BASE_IMAGE.
    assert context_tag(context, inside, {}) == plain
    outside = tmp_path / "docker" / "Dockerfile.gpu"
    write(outside, "FROM scratch\n")
    with_outside = context_tag(context, outside)
    assert with_outside != plain
    write(outside, "FROM busybox\n")
    assert context_tag(context, outside) != with_outside
    with_args = context_tag(context, inside, {"PIP_INDEX_URL": "https://pypi.example/simple"})
    assert with_args != plain
    assert context_tag(context, inside, {"PIP_INDEX_URL": "https://mirror.example/simple"}) != (
        with_args
    )


def test_a_git_directory_in_the_context_is_not_part_of_the_tag(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "x = 1\n")
    before = context_tag(tmp_path)
    write(tmp_path / ".git" / "HEAD", "ref: refs/heads/main\n")
    assert context_tag(tmp_path) == before
