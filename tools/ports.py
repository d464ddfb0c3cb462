"""A free TCP port on loopback, the one helper the local run, the test planes, the tests and the
benchmark share: asking the kernel (bind to port 0) means parallel runs never collide."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody listens on at this moment on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
