"""The filesystem backend's own ways (trainer/storage/file.py): paths and file:// URLs, what a
killed write leaves and who removes it, and a snapshot on a volume without hard links. The
contract it shares with every backend is test_contract; the kill and O_DIRECT paths through the
store, test_checkpoint."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from trainer.durable_file import temporary_name
from trainer.storage import open_storage
from trainer.storage.file import FileStorage


def test_a_path_and_a_file_url_are_the_same_root(tmp_path: Path) -> None:
    storage = open_storage(f"file://{tmp_path}/run")
    assert storage == FileStorage(tmp_path / "run") == open_storage(tmp_path / "run")
    assert storage.local_directory() == tmp_path / "run"
    assert storage.location_of("manifest.json") == str(tmp_path / "run" / "manifest.json")


def test_why_a_root_is_missing_or_unusable(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    assert open_storage(tmp_path / "nowhere").missing() == "does not exist"
    assert open_storage(afile).missing() == "is not a directory"
    assert open_storage(afile).unusable() == "exists and is not a directory"
    assert (
        open_storage(afile / "run").unusable() == f"cannot be created: {afile} is not a directory"
    )
    assert open_storage(tmp_path / "new" / "run").unusable() is None  # created on demand
    assert sorted(tmp_path.iterdir()) == [afile]  # asking created nothing


def test_only_what_a_killed_write_left_is_removed(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.write("checkpoint.pt", lambda sink: sink.write(b"committed"))
    left_by_a_kill = temporary_name(tmp_path / "checkpoint-2.pt")
    left_by_a_kill.write_bytes(b"half")
    storage.remove_partial_writes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_a_copy_on_a_volume_without_hard_links_is_a_whole_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*_args: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    storage = open_storage(tmp_path)
    storage.write("checkpoint.pt", lambda sink: sink.write(b"weights"))
    monkeypatch.setattr(os, "link", no_links)
    storage.copy("checkpoint.pt", "snapshot.pt")
    assert (tmp_path / "snapshot.pt").read_bytes() == b"weights"
    snapshot, checkpoint = tmp_path / "snapshot.pt", tmp_path / "checkpoint.pt"
    assert snapshot.stat().st_ino != checkpoint.stat().st_ino
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint.pt", "snapshot.pt"]
