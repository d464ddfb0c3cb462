"""tools/s3_server.py: the pinned jar is the only one ever run, the server it starts enforces its
key, and the command line refuses what cannot work before anything starts."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tools import s3_server as tool
from tools.s3_server import S3Endpoint, S3ServerError


def test_a_download_that_is_not_the_pinned_jar_is_refused_and_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    impostor = tmp_path / "impostor.jar"
    impostor.write_bytes(b"not s3proxy")
    monkeypatch.setattr(tool, "S3PROXY_URL", impostor.as_uri())
    cache = tmp_path / "cache"
    with pytest.raises(S3ServerError, match="not the pinned a4d02596"):
        tool.server_jar(cache)
    assert list(cache.iterdir()) == []


def test_the_cached_jar_is_used_without_a_download(
    s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tool, "S3PROXY_URL", "http://127.0.0.1:9/unreachable")
    assert tool.server_jar().name == f"s3proxy-{tool.S3PROXY_VERSION}.jar"


def test_the_server_refuses_an_unsigned_request(s3_server: S3Endpoint) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{s3_server.url}/", timeout=10)
    assert refused.value.code == 403
    assert set(s3_server.environment()) == {
        "AWS_ENDPOINT_URL_S3",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
    }


def test_without_java_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(S3ServerError, match="needs Java 17 or later on PATH"):
        tool._java()


def test_a_port_out_of_range_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.s3_server", "--dir", str(tmp_path / "s3"), "--port", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--port must be 1-65535, got 0" in done.stderr
    assert not (tmp_path / "s3").exists()
