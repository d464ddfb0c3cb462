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
