"""The crossings between this machine's network namespace and the real node's.

The real node (cluster/real_node.py) keeps its bridge, its pods' addresses and every packet
they send inside a network namespace the fixture creates; this machine's own namespace keeps nothing
but loopback. Three kinds of connection must cross, and each does so here without any address
outside 127.0.0.0/8 appearing in this machine's namespace:

- `relay`: the node's processes reach loopback services of this machine (the API server, the
  registry) at the same 127.0.0.1:PORT inside their namespace. Each port listens on the node's
  loopback and is connected to this machine's. A `--node-port` listens on the node's address
  instead (NODE_IP:PORT, on its bridge), where the node's pods reach a loopback service of this
  machine (the suite's S3 server) from their own namespaces.
- `egress-proxy`: the API server reaches the node (the kubelet's logs and exec, pods) through its
  egress selector: an HTTP CONNECT proxy on a unix socket that dials the node's addresses inside
  the node's namespace and loopback addresses here, and refuses every other address. The API
  server therefore never dials anything itself, with or without a real node.
- `entered_netns`: a short block of this process runs in the node's namespace (readiness checks).

    python -m cluster.node_network relay --netns PATH --port 6443 [--node-port 9000 ...]
    python -m cluster.node_network egress-proxy --socket PATH --netns PATH --node-network CIDR
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# The node's private network: its bridge holds NODE_IP (the node's InternalIP, where the kubelet
# and the cluster DNS listen); pods get the rest. Nothing outside the node's namespace routes it.
NODE_NETWORK = ipaddress.IPv4Network("10.244.0.0/24")
NODE_IP = ipaddress.IPv4Address("10.244.0.1")
BRIDGE = "pd-br0"
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_CHUNK = 1 << 16
_MAX_REQUEST = 8192


@dataclass(frozen=True)
class NodeNamespaces:
    """A network and a mount namespace of the node's own, each held by a file in `directory`
    (a private bind mount, as unshare requires), so processes join them one by one (`enter`)
    and unmounting the files ends both once the last member exits. The mount namespace starts
    as a private copy of this machine's: mounts made inside (volumes, container root
    filesystems, network namespace files) never show here, and all vanish with it."""

    directory: Path

    @property
    def net(self) -> Path:
        return self.directory / "net"

    @property
    def mnt(self) -> Path:
        return self.directory / "mnt"

    def enter(self) -> list[str]:
        """The argv prefix that runs a command inside both namespaces."""
        return ["nsenter", f"--net={self.net}", f"--mount={self.mnt}", "--"]

    def create(self) -> None:
        self.directory.mkdir(parents=True)
        _run("mount", "--bind", str(self.directory), str(self.directory))
        _run("mount", "--make-private", str(self.directory))
        self.net.touch()
        self.mnt.touch()
        _run(
            *("unshare", f"--net={self.net}", f"--mount={self.mnt}", "--propagation", "private"),
            "true",
        )
        # Only the bridge and loopback: no route leads anywhere but the node's own network.
        self.run("ip", "link", "set", "lo", "up")
        self.run("ip", "link", "add", BRIDGE, "type", "bridge")
        self.run("ip", "address", "add", f"{NODE_IP}/{NODE_NETWORK.prefixlen}", "dev", BRIDGE)
        self.run("ip", "link", "set", BRIDGE, "up")

    def run(self, *argv: str) -> str:
        return _run(*self.enter(), *argv)

    def destroy(self) -> None:
        """Release both namespaces (their members must be gone) and the directory."""
        for path in (self.net, self.mnt, self.directory):
            if path.exists():
                subprocess.run(["umount", str(path)], capture_output=True, check=False)
        shutil.rmtree(self.directory, ignore_errors=True)


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _setns(fd: int) -> None:
    # os.setns arrives with Python 3.12; the network namespace is per thread either way.
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


@contextlib.contextmanager
def entered_netns(path: Path) -> Iterator[None]:
    """Run the block (this thread only) in the network namespace bound at `path`; sockets made
    inside stay in it after the block."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Copy both ways until both sides are done, then close both."""
    try:
        await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))
    finally:
        for _, writer in (a, b):
            writer.close()


def _listener_in(netns: Path, port: int, address: str = "127.0.0.1") -> socket.socket:
    with entered_netns(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def relay(netns: Path, ports: Sequence[int], node_ports: Sequence[int] = ()) -> None:
    """127.0.0.1:PORT in `netns` forwards to 127.0.0.1:PORT here, for each of `ports`; NODE_IP:PORT
    does, for each of `node_ports`."""

    def forwarder(
        port: int,
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                upstream = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                writer.close()
                return
            await _splice((reader, writer), upstream)

        return forward

    listeners = [(port, "127.0.0.1") for port in ports]
    listeners += [(port, str(NODE_IP)) for port in node_ports]
    servers = [
        await asyncio.start_server(forwarder(port), sock=_listener_in(netns, port, address))
        for port, address in listeners
    ]
    shown = ", ".join(f"{address}:{port}" for port, address in listeners)
    print(f"relaying {shown} in {netns} to 127.0.0.1 here", flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


class EgressProxy:
    """HTTP CONNECT over a unix socket, the API server's egress selector `HTTPConnect` protocol."""

    def __init__(self, netns: Path, node_network: ipaddress.IPv4Network) -> None:
        self.netns = netns
        self.node_network = node_network

    def _socket_for(self, address: ipaddress.IPv4Address) -> socket.socket:
        """A socket in the namespace `address` lives in; PermissionError for any other address."""
        if address.is_loopback:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if address in self.node_network:
            if not self.netns.exists():
                raise ConnectionRefusedError(f"no node network namespace at {self.netns}")
            with entered_netns(self.netns):
                return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raise PermissionError(f"{address} is neither loopback nor in {self.node_network}")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        request = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        status, upstream = await self._connect(request)
        writer.write(f"HTTP/1.1 {status}\r\n\r\n".encode())
        await writer.drain()
        if upstream is None:
            writer.close()
            return
        await _splice((reader, writer), upstream)

    async def _connect(
        self, request: list[str]
    ) -> tuple[str, tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]:
        if len(request) != 3 or request[0] != "CONNECT":
            return "405 Method Not Allowed", None
        host, _, port = request[1].rpartition(":")
        try:
            address = ipaddress.IPv4Address(host)
            sock = self._socket_for(address)
        except ValueError:
            return "400 Bad Request", None  # a name: nothing here resolves names
        except PermissionError as error:
            print(f"refused CONNECT {request[1]}: {error}", flush=True)
            return "403 Forbidden", None
        except ConnectionRefusedError:
            return "503 Service Unavailable", None
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, (str(address), int(port)))
        except (OSError, ValueError):
            sock.close()
            return "502 Bad Gateway", None
        return "200 Connection established", await asyncio.open_connection(sock=sock)

    async def serve(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self.handle, path=path, limit=_MAX_REQUEST)
        path.chmod(0o600)
        print(f"egress proxy on {path} for loopback and {self.node_network}", flush=True)
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.node_network", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    relay_args = commands.add_parser("relay", help="node loopback ports to this machine's")
    relay_args.add_argument("--netns", type=Path, required=True, help="the node's namespace file")
    relay_args.add_argument("--port", type=int, action="append", default=[])
    relay_args.add_argument(
        "--node-port", type=int, action="append", default=[], help="listen on NODE_IP:PORT"
    )
    proxy_args = commands.add_parser("egress-proxy", help="the API server's way to the node")
    proxy_args.add_argument("--socket", type=Path, required=True, help="unix socket to serve")
    proxy_args.add_argument("--netns", type=Path, required=True, help="the node's namespace file")
    proxy_args.add_argument("--node-network", type=ipaddress.IPv4Network, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.command == "relay":
        if not args.port and not args.node_port:
            parser.error("relay: at least one --port or --node-port")
        work = relay(args.netns, args.port, args.node_port)
    else:
        work = EgressProxy(args.netns, args.node_network).serve(args.socket)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
