"""tools/plot_run.py (`make plot`): where a stack's run is (its bucket, make checkpoint's copy,
make local's run, or --root), the picture it draws from there, and its one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from settings.stack import load_stack_file
from tests.conftest import REPO_ROOT
from tools import plot_run
from tools.plot_run import PlotRunError, find_run, main
from trainer.metrics import METRICS_NAME
from trainer.storage import open_storage, s3

PNG = b"\x89PNG\r\n\x1a\n"


def rows(epochs: int = 3) -> str:
    return "".join(
        json.dumps(
            {
                "epoch": epoch,
                "total_epochs": epochs,
                "loss": 1.0 / epoch,
                "samples": 256,
                "seconds": 0.5,
                "samples_per_s": 512.0,
                "eta_s": 0.0,
                "lr": 0.1,
                "saves": [8] if epoch == 2 else [],
                "resumed": epoch == 3,
            }
        )
        + "\n"
        for epoch in range(1, epochs + 1)
    )


def a_run(directory: Path, mtime: float | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    metrics = directory / METRICS_NAME
    metrics.write_text(rows())
    if mtime is not None:
        os.utime(metrics, (mtime, mtime))
    return directory


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout of its own: the tool's .checkpoints/ there, the repository's stack files."""
    root = tmp_path / "checkout"
    root.mkdir()
    monkeypatch.setattr(plot_run, "REPO_ROOT", root)
    return root


def test_a_claim_stacks_run_is_what_make_checkpoint_copied(checkout: Path) -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    retrieved = a_run(checkout / ".checkpoints" / "dev-retrieved")
    run = find_run(settings, "dev", repo_root=checkout)
    assert (run.root, run.source) == (str(retrieved), "make checkpoint's copy")


def test_a_claim_stacks_local_run_is_in_its_job_directory(checkout: Path) -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    local = a_run(checkout / ".checkpoints" / "dev" / "ddp-dev")  # make local's, job.name's
    run = find_run(settings, "dev", repo_root=checkout)
    assert (run.root, run.source) == (str(local), "make local's run")


def test_with_both_the_newer_run_is_drawn(checkout: Path) -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    retrieved = a_run(checkout / ".checkpoints" / "dev-retrieved", mtime=1_000_000)
    local = a_run(checkout / ".checkpoints" / "dev" / "ddp-dev", mtime=2_000_000)
    assert find_run(settings, "dev", repo_root=checkout).root == str(local)
    os.utime(retrieved / METRICS_NAME, (3_000_000, 3_000_000))
    assert find_run(settings, "dev", repo_root=checkout).root == str(retrieved)


def test_nothing_retrieved_is_one_line_saying_to_run_make_checkpoint(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    (checkout / ".checkpoints" / "dev-retrieved").mkdir(parents=True)  # a copy without metrics
    with pytest.raises(PlotRunError) as missing:
        find_run(settings, "dev", repo_root=checkout)
    message = str(missing.value)
    assert ".checkpoints/dev-retrieved/metrics.jsonl does not exist" in message
    assert "make checkpoint STACK=dev" in message
    assert "make local STACK=dev (it trains in .checkpoints/dev/ddp-dev)" in message

    assert main(["--stack", "dev"]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"error: {message}\n"
    assert not (checkout / ".checkpoints" / "dev-run.png").exists()


def test_root_names_the_run_or_the_checkpoint_root_holding_it(
    checkout: Path, tmp_path: Path
) -> None:
    settings = load_stack_file("dev", REPO_ROOT)
    a_run(checkout / ".checkpoints" / "dev-retrieved")  # --root wins over what is found
    run_dir = a_run(tmp_path / "elsewhere" / "ddp-dev")
    chosen = find_run(settings, "dev", root=str(run_dir), repo_root=checkout)
    assert (chosen.root, chosen.source) == (str(run_dir), "--root")
    # make local CHECKPOINT_ROOT=DIR: the run is DIR/<job.name>.
    chosen = find_run(settings, "dev", root=str(tmp_path / "elsewhere"), repo_root=checkout)
    assert chosen.root == str(run_dir)
    with pytest.raises(PlotRunError, match=r"nowhere/metrics.jsonl does not exist \(nor "):
        find_run(settings, "dev", root=str(tmp_path / "nowhere"), repo_root=checkout)


def test_make_plot_draws_the_found_run_to_the_default_png(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    retrieved = a_run(checkout / ".checkpoints" / "dev-retrieved")
    assert main(["--stack", "dev"]) == 0
    out = checkout / ".checkpoints" / "dev-run.png"
    assert out.read_bytes()[:8] == PNG
    said = capsys.readouterr().out
    assert said == f"{out}: stack dev's run from make checkpoint's copy, {retrieved}\n"


def test_root_and_out_on_the_command_line(checkout: Path, tmp_path: Path) -> None:
    run_dir = a_run(tmp_path / "run")
    out = tmp_path / "pictures" / "run.png"
    assert main(["--stack", "dev", "--root", str(run_dir), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG


def test_a_stack_file_that_cannot_be_read_is_exit_code_2(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--stack", "no-such-stack"]) == 2
    assert "no stack file" in capsys.readouterr().err


# -- a stack with checkpoints.storage: s3: its bucket, with its endpoint --------------------------


def s3_stack(stacks: Path, bucket: str, endpoint: str) -> Path:
    stacks.mkdir(parents=True, exist_ok=True)
    (stacks / "Pulumi.s3.yaml").write_text(
        "config:\n"
        "  pytorch-distributed:image: {repository: registry.example.com/ml/trainer}\n"
        "  pytorch-distributed:checkpoints:\n"
        "    storage: s3\n"
        f"    bucket: {bucket}\n"
        "    prefix: runs\n"
        f"    endpoint: {endpoint}\n"
        "  pytorch-distributed:job: {name: ddp-s3}\n",
        encoding="utf-8",
    )
    return stacks


def test_an_s3_stacks_run_is_its_bucket_read_with_its_endpoint(
    s3_server: Any,
    s3_bucket: str,
    checkout: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stacks = s3_stack(tmp_path / "stacks", s3_bucket, s3_server.url)
    url = f"s3://{s3_bucket}/runs/ddp-s3"
    assert load_stack_file("s3", stacks).checkpoint_dir == url
    a_run(checkout / ".checkpoints" / "s3-retrieved")  # the bucket, not a copy, is the run
    open_storage(url).write(METRICS_NAME, lambda sink: sink.write(rows().encode()))
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")  # the stack's endpoint, for the plot only
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    s3.forget_clients()

    assert main(["--stack", "s3", "--stack-dir", str(stacks)]) == 0
    out = checkout / ".checkpoints" / "s3-run.png"
    assert out.read_bytes()[:8] == PNG
    assert capsys.readouterr().out == f"{out}: stack s3's run from the stack's s3, {url}\n"
    assert "AWS_ENDPOINT_URL_S3" not in os.environ


def test_an_s3_stack_without_metrics_names_its_url_and_what_trains_it(
    s3_server: Any,
    s3_bucket: str,
    checkout: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stacks = s3_stack(tmp_path / "stacks", s3_bucket, s3_server.url)
    assert main(["--stack", "s3", "--stack-dir", str(stacks)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"error: s3://{s3_bucket}/runs/ddp-s3/metrics.jsonl does not exist: no epoch of job "
        "ddp-s3 has ended yet (make up STACK=s3, or make local STACK=s3, trains it)\n"
    )
