"""What every backend of a run's storage guarantees (trainer/storage/__init__.py), checked on
each: the filesystem and the tests' object store (conftest.py). The checkpoint store builds its
commit protocol on exactly these promises, so a backend that keeps them keeps the store's."""

from __future__ import annotations

import hashlib
import threading

import pytest

from trainer.storage import RunStorage, Sink, locate, open_storage


def test_a_written_object_reads_back_with_the_sha256_and_size_the_write_returned(
    storage: RunStorage,
) -> None:
    data = bytes(range(256)) * 1000
    written = storage.write("object.bin", lambda sink: sink.write(data))
    assert (written.name, written.size) == ("object.bin", len(data))
    assert written.sha256 == hashlib.sha256(data).hexdigest()
    assert storage.exists("object.bin")
    assert storage.read_bytes("object.bin") == data
    with storage.local_file("object.bin") as path:
        assert path.read_bytes() == data


def test_an_object_in_flight_is_invisible_until_its_write_returns(storage: RunStorage) -> None:
    storage.write("manifest.json", lambda sink: sink.write(b"old"))
    bytes_out, finish = threading.Event(), threading.Event()

    def slow(sink: Sink) -> None:
        sink.write(b"new, ")
        bytes_out.set()
        finish.wait(60)
        sink.write(b"whole")

    writer = threading.Thread(target=storage.write, args=("manifest.json", slow))
    writer.start()
    try:
        assert bytes_out.wait(60)
        assert storage.read_bytes("manifest.json") == b"old"  # never a half-written object
    finally:
        finish.set()
        writer.join()
    assert storage.read_bytes("manifest.json") == b"new, whole"


def test_a_write_that_fails_leaves_the_previous_object_and_no_garbage(storage: RunStorage) -> None:
    storage.write("manifest.json", lambda sink: sink.write(b"old"))

    def failing(sink: Sink) -> None:
        sink.write(b"half")
        raise RuntimeError("serialisation failed")

    with pytest.raises(RuntimeError, match="serialisation failed"):
        storage.write("manifest.json", failing)
    with pytest.raises(RuntimeError):
        storage.write("never.bin", failing)
    assert storage.read_bytes("manifest.json") == b"old"
    assert not storage.exists("never.bin")


def test_an_absent_object_is_file_not_found_for_every_reader(storage: RunStorage) -> None:
    assert not storage.exists("absent")
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("absent")
    with pytest.raises(FileNotFoundError), storage.local_file("absent"):
        pass
    storage.delete("absent")  # nothing to do, no error
    assert storage.move("absent", "rejected/absent") is False


def test_lines_append_to_a_text_object_creating_it(storage: RunStorage) -> None:
    storage.append_line("metrics.jsonl", '{"epoch": 1}')
    storage.append_line("metrics.jsonl", '{"epoch": 2}')
    assert storage.read_bytes("metrics.jsonl") == b'{"epoch": 1}\n{"epoch": 2}\n'


def test_a_copy_keeps_what_it_copied_when_the_source_is_written_again(
    storage: RunStorage,
) -> None:
    storage.write("checkpoint.pt", lambda sink: sink.write(b"first"))
    storage.copy("checkpoint.pt", "snapshot.pt")
    storage.write("checkpoint.pt", lambda sink: sink.write(b"second"))
    assert storage.read_bytes("snapshot.pt") == b"first"
    storage.copy("checkpoint.pt", "snapshot.pt")  # over an existing copy
    assert storage.read_bytes("snapshot.pt") == b"second"


def test_move_sets_an_object_aside_into_a_folder_and_delete_removes_it(
    storage: RunStorage,
) -> None:
    storage.write("bad.pt", lambda sink: sink.write(b"corrupt"))
    assert storage.move("bad.pt", "rejected/bad.pt") is True
    assert not storage.exists("bad.pt")
    assert storage.read_bytes("rejected/bad.pt") == b"corrupt"
    storage.delete("rejected/bad.pt")
    assert not storage.exists("rejected/bad.pt")


def test_a_location_names_the_root_or_one_object_of_it(storage: RunStorage) -> None:
    storage.write("checkpoint.pt", lambda sink: sink.write(b"weights"))
    where = storage.location_of("checkpoint.pt")
    assert where.startswith(storage.location) and where.endswith("/checkpoint.pt")
    as_root = open_storage(where)
    parent, name = as_root.parent()
    assert (parent.identity, name) == (storage.identity, "checkpoint.pt")
    assert storage.encloses(as_root) and storage.encloses(open_storage(storage.location))
    assert not as_root.encloses(storage)

    root, nothing = locate(storage.location) or (None, "?")
    assert root is not None and (root.identity, nothing) == (storage.identity, None)
    found = locate(where)
    assert found is not None and (found[0].identity, found[1]) == (storage.identity, name)
    assert locate(storage.location_of("absent.pt")) is None
    assert storage.unusable() is None and storage.missing() is None
