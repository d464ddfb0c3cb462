"""Whether a Docker Engine API (Docker's, or podman's `podman system service`) answers: asked by
the Pulumi CLI wrapper before a stack builds its image (tools/pulumi_run.py) and by the
one-machine cluster of the Docker API it serves (cluster/docker_api.py).

Standard library only, and nothing read at import: tools/pulumi_run.py runs with any python3.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit


def engine_answers(host: str, timeout: float = 5) -> bool:
    """A Docker Engine API (Docker's or podman's) answers `GET /_ping` at `host` (unix:// or
    tcp://; TLS and ssh:// hosts are taken on trust, this does not speak them)."""
    parts = urlsplit(host)
    address: str | tuple[str, int]
    if parts.scheme == "unix":
        family, address = socket.AF_UNIX, parts.path
    elif parts.scheme in ("tcp", "http") and parts.hostname and parts.port:
        family, address = socket.AF_INET, (parts.hostname, parts.port)
    else:
        return True
    try:
        with socket.socket(family, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(address)
            connection.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return connection.recv(64).split(b" ", 2)[1:2] == [b"200"]
    except (OSError, IndexError):
        return False
