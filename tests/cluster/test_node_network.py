"""cluster/node_network.py: the API server's egress proxy reaches loopback and the real node's
network and refuses every other address; the relay carries the node's loopback ports to this
machine's; the node's namespace routes nowhere but its bridge. The namespace tests need root
(mounts, namespaces), as the real node does."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cluster.node_network import (
    BRIDGE,
    NODE_IP,
    NODE_NETWORK,
    EgressProxy,
    NodeNamespaces,
    entered_netns,
    relay,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and mounts need root")


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def echo_server(sock: socket.socket | None = None) -> AsyncIterator[int]:
    """An echo server on 127.0.0.1 (or on `sock`, bound already); yields its port."""
    if sock is None:
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    else:
        server = await asyncio.start_server(_echo, sock=sock)
    async with server:
        yield server.sockets[0].getsockname()[1]


@contextlib.asynccontextmanager
async def serving(proxy: EgressProxy, path: Path) -> AsyncIterator[Path]:
    task = asyncio.create_task(proxy.serve(path))
    while not path.exists():
        await asyncio.sleep(0.01)
    try:
        yield path
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def connect(
    path: Path, target: str
) -> tuple[str, asyncio.StreamReader, asyncio.StreamWriter]:
    """What the API server sends: CONNECT, then the tunnel's bytes."""
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    return head.decode().split("\r\n", 1)[0], reader, writer


async def round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"ping")
    await writer.drain()
    data = await asyncio.wait_for(reader.readexactly(4), 10)
    writer.close()
    return data


def test_the_proxy_tunnels_to_loopback(tmp_path: Path) -> None:
    async def scenario() -> tuple[str, bytes]:
        proxy = EgressProxy(tmp_path / "no-node", NODE_NETWORK)
        async with echo_server() as port, serving(proxy, tmp_path / "egress.sock") as path:
            status, reader, writer = await connect(path, f"127.0.0.1:{port}")
            return status, await round_trip(reader, writer)

    assert asyncio.run(scenario()) == ("HTTP/1.1 200 Connection established", b"ping")


@pytest.mark.parametrize(
    ("target", "status"),
    [
        # Anything beyond loopback and the node's network: the host's resolver, the internet.
        ("10.255.255.53:53", "403 Forbidden"),
        ("192.0.2.10:10250", "403 Forbidden"),
        ("10.244.1.1:10250", "403 Forbidden"),  # next to the node's network, not in it
        # Names are never resolved here.
        ("registry-1.docker.io:443", "400 Bad Request"),
        # The node's address while no node runs.
        (f"{NODE_IP}:10250", "503 Service Unavailable"),
    ],
)
def test_the_proxy_refuses_every_other_address(tmp_path: Path, target: str, status: str) -> None:
    async def scenario() -> str:
        proxy = EgressProxy(tmp_path / "no-node", NODE_NETWORK)
        async with serving(proxy, tmp_path / "egress.sock") as path:
            answer, _, writer = await connect(path, target)
            writer.close()
            return answer

    assert asyncio.run(scenario()) == f"HTTP/1.1 {status}"


def test_the_proxy_answers_only_connect(tmp_path: Path) -> None:
    async def scenario() -> bytes:
        proxy = EgressProxy(tmp_path / "no-node", NODE_NETWORK)
        async with serving(proxy, tmp_path / "egress.sock") as path:
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            return await reader.readuntil(b"\r\n")

    assert asyncio.run(scenario()) == b"HTTP/1.1 405 Method Not Allowed\r\n"


@needs_root
def test_the_node_namespace_routes_only_its_bridge(namespaces: NodeNamespaces) -> None:
    routes = [line.split() for line in namespaces.run("ip", "-4", "route", "show").splitlines()]
    assert routes == [f"{NODE_NETWORK} dev {BRIDGE} proto kernel scope link src {NODE_IP}".split()]
    with entered_netns(namespaces.net):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # Nothing beyond it can even be addressed (this machine's resolver, say).
    with udp, pytest.raises(OSError, match="unreachable"):
        udp.connect(("10.255.255.53", 53))


@needs_root
def test_the_relay_and_the_proxy_cross_into_and_out_of_the_node(
    namespaces: NodeNamespaces,
) -> None:
    async def scenario() -> tuple[bytes, str, bytes]:
        async with echo_server() as host_port:
            relaying = asyncio.create_task(relay(namespaces.net, [host_port], [host_port]))
            await asyncio.sleep(0.2)
            # From the node: its own 127.0.0.1:PORT reaches this machine's; so does its address
            # (NODE_IP:PORT, a `--node-port`), which its pods reach from their namespaces.
            relayed = b""
            for address in ("127.0.0.1", str(NODE_IP)):
                with entered_netns(namespaces.net):
                    inside = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                inside.setblocking(False)
                await asyncio.get_running_loop().sock_connect(inside, (address, host_port))
                relayed += await round_trip(*await asyncio.open_connection(sock=inside))
            relaying.cancel()
        # To the node: the proxy reaches a server on the node's address, inside its namespace.
        with entered_netns(namespaces.net):
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((str(NODE_IP), 0))
        proxy = EgressProxy(namespaces.net, NODE_NETWORK)
        sock_path = namespaces.directory.parent / "egress.sock"
        async with echo_server(listener) as node_port, serving(proxy, sock_path) as path:
            status, reader, writer = await connect(path, f"{NODE_IP}:{node_port}")
            proxied = await round_trip(reader, writer)
        return relayed, status, proxied

    relayed, status, proxied = asyncio.run(scenario())
    assert relayed == b"pingping"
    assert (status, proxied) == ("HTTP/1.1 200 Connection established", b"ping")
