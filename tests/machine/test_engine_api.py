"""machine/engine_api.py: an engine's API answers only where one listens."""

from __future__ import annotations

import socketserver
import threading
from pathlib import Path

from machine.engine_api import engine_answers


def test_an_engine_answers_only_where_one_listens(tmp_path: Path) -> None:
    class Ping(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.rfile.readline()
            self.wfile.write(b"HTTP/1.1 200 OK\r\n\r\nOK")

    sock = tmp_path / "engine.sock"
    with socketserver.UnixStreamServer(str(sock), Ping) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        assert engine_answers(f"unix://{sock}")
        server.shutdown()
    assert not engine_answers(f"unix://{tmp_path / 'none.sock'}")
    assert not engine_answers("tcp://127.0.0.1:1")
    assert engine_answers("ssh://user@builder")  # not checked here: taken on trust
