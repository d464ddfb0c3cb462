"""A real S3-compatible server on loopback, for the tests and for `make local` with an
``s3://`` root: S3Proxy (github.com/gaul/s3proxy, Apache-2.0), the S3 API over jclouds'
filesystem blobstore, with AWS Signature V4 enforced for one access key. It is published on Maven
Central as one jar with its dependencies, so it costs a download (about 55 MB, pinned by version
and sha256, kept in ~/.cache/pytorch-distributed/s3proxy/) and the machine's Java 17 or later,
and no build: the e2e tool build's budget stays where it was.

    python -m tools.s3_server --dir .s3 [--port 9000] [--bucket ckpt]

runs one in the foreground and prints the environment a client needs (``AWS_ENDPOINT_URL_S3``,
the key pair, the region); the trainer and `make local`/`make checkpoint` read exactly those.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from machine import procs
from machine.ports import LOOPBACK, free_port

S3PROXY_VERSION = "4.1.0"
S3PROXY_SHA256 = "a4d025969aaf796616ed4b1e2491d87d455ce84bb28cb9db086b2e6aaa68b48d"
S3PROXY_URL = (
    "https://repo1.maven.org/maven2/org/gaul/s3proxy/"
    f"{S3PROXY_VERSION}/s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"
)
REGION = "us-east-1"
START_TIMEOUT_S = 60.0
_DOWNLOAD_TIMEOUT_S = 300.0


class S3ServerError(RuntimeError):
    """The server cannot be fetched or started: one line saying why and what to do."""


@dataclass(frozen=True)
class S3Endpoint:
    """Where a running server answers and the one key pair it accepts."""

    url: str
    access_key: str
    secret_key: str
    region: str = REGION

    def environment(self) -> dict[str, str]:
        """boto3's own variables, which the trainer's s3 backend and the tools read."""
        return {
            "AWS_ENDPOINT_URL_S3": self.url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytorch-distributed" / "s3proxy"


def server_jar(cache: Path | None = None) -> Path:
    """The pinned jar, downloaded once; a file that does not match its sha256 is never used."""
    directory = cache or cache_dir()
    jar = directory / f"s3proxy-{S3PROXY_VERSION}.jar"
    if jar.is_file() and _sha256(jar) == S3PROXY_SHA256:
        return jar
    directory.mkdir(parents=True, exist_ok=True)
    print(
        f"s3_server: downloading S3Proxy {S3PROXY_VERSION} (about 55 MB) from Maven Central",
        file=sys.stderr,
    )
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".download-", delete=False) as part:
        try:
            with urllib.request.urlopen(S3PROXY_URL, timeout=_DOWNLOAD_TIMEOUT_S) as answer:
                shutil.copyfileobj(answer, part, 1 << 20)
        except (urllib.error.URLError, OSError) as error:
            Path(part.name).unlink(missing_ok=True)
            raise S3ServerError(f"cannot download {S3PROXY_URL}: {error}") from None
    got = _sha256(Path(part.name))
    if got != S3PROXY_SHA256:
        Path(part.name).unlink(missing_ok=True)
        raise S3ServerError(
            f"{S3PROXY_URL} has sha256 {got}, not the pinned {S3PROXY_SHA256}; nothing was kept"
        )
    Path(part.name).replace(jar)
    return jar


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise S3ServerError(
            "the S3 server needs Java 17 or later on PATH (Debian: apt-get install "
            "openjdk-17-jre-headless)"
        )
    return java


def _properties(data_dir: Path, endpoint: S3Endpoint) -> str:
    return "\n".join(
        [
            f"s3proxy.endpoint={endpoint.url}",
            "s3proxy.authorization=aws-v4",
            f"s3proxy.identity={endpoint.access_key}",
            f"s3proxy.credential={endpoint.secret_key}",
            "jclouds.provider=filesystem-nio2",
            f"jclouds.filesystem.basedir={data_dir.resolve()}",
            "",
        ]
    )


def _answers(url: str) -> bool:
    """Any HTTP answer (an anonymous request is refused with 403) means the server is up."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def running_server(
    data_dir: Path,
    *,
    port: int | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    buckets: Sequence[str] = (),
    log: Path | None = None,
) -> Iterator[S3Endpoint]:
    """A server over ``data_dir`` (each bucket a directory in it) on a loopback port, stopped
    when the block ends; the data stays. Keys default to fresh random ones."""
    data_dir.mkdir(parents=True, exist_ok=True)
    endpoint = S3Endpoint(
        f"http://{LOOPBACK}:{port or free_port()}",
        access_key or f"pd{secrets.token_hex(8)}",
        secret_key or secrets.token_hex(20),
    )
    jar, java = server_jar(), _java()
    with tempfile.TemporaryDirectory(prefix="s3proxy-") as scratch:
        properties = Path(scratch) / "s3proxy.conf"
        properties.write_text(_properties(data_dir, endpoint))
        properties.chmod(0o600)
        log_path = log or Path(scratch) / "s3proxy.log"
        with log_path.open("ab") as output:
            server = subprocess.Popen(
                [java, "-Xmx512m", "-jar", str(jar), "--properties", str(properties)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            _wait_until_up(server, endpoint.url, log_path)
            for bucket in buckets:
                create_bucket(endpoint, bucket)
            yield endpoint
        finally:
            procs.stop(server, grace=10)


def _wait_until_up(server: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(url):
        if server.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise S3ServerError(
                f"S3Proxy did not answer on {url} within {START_TIMEOUT_S:g} s "
                f"(exit code {server.poll()}); its log ends:\n" + "\n".join(tail)
            )
        time.sleep(0.1)


def create_bucket(endpoint: S3Endpoint, bucket: str) -> None:
    """Through the trainer's own backend, so the server sees what the trainer would send."""
    from trainer.storage import open_storage
    from trainer.storage.s3 import forget_clients

    with _environment(endpoint.environment()):
        forget_clients()
        try:
            open_storage(f"s3://{bucket}").create_bucket()
        finally:
            forget_clients()


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.s3_server",
        description="Run an S3-compatible server (S3Proxy) on loopback until Ctrl-C.",
    )
    parser.add_argument("--dir", type=Path, required=True, help="where the buckets are kept")
    parser.add_argument("--port", type=int, default=9000, help="the loopback port (default: 9000)")
    parser.add_argument(
        "--bucket", action="append", default=[], help="a bucket to create (repeatable)"
    )
    parser.add_argument("--access-key", default="pytorch-distributed", help="the key id it accepts")
    parser.add_argument(
        "--secret-key",
        default=os.environ.get("PD_S3_SECRET_KEY"),
        help="the secret it accepts (default: $PD_S3_SECRET_KEY, else a random one)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 1 <= args.port <= 65535:
        _parser().error(f"--port must be 1-65535, got {args.port}")
    try:
        with running_server(
            args.dir,
            port=args.port,
            access_key=args.access_key,
            secret_key=args.secret_key,
            buckets=args.bucket,
            log=args.dir.parent / f"{args.dir.name}.log",
        ) as endpoint:
            print("S3 server up; for the trainer, make local and make checkpoint:")
            for name, value in endpoint.environment().items():
                print(f"export {name}={value}")
            sys.stdout.flush()
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    except (S3ServerError, OSError) as error:
        print(f"s3_server: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
