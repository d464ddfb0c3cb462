"""--parallelism fsdp with its checkpoints in object storage, on a real S3-compatible server
(tools/s3_server.py): every rank uploads its shards, rank 0 commits them with the manifest. A
run SIGKILLed while rank 0's upload is held loses no committed checkpoint and resumes bit for bit
on the same world size (model and optimizer state); a 2-rank checkpoint resumes on 4 ranks; a
corrupt shard of the newest checkpoint falls back to the previous one. Compared with the same
uninterrupted run on the filesystem (test_fsdp's run: the residual MLP, 8 steps an epoch, a
checkpoint every 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import Background, inspect_cli, manifest_epochs, run_trainer, wait_until
from tests.trainer.test_fsdp import EPOCHS, STEPS, TOLERANCE, args
from tests.trainer.test_resume_world_size import losses_by_step, step_lines
from trainer.checkpoint import HOLD_AFTER_ENV, CheckpointStore, shards_on_disk, verify_all
from trainer.sharded import MODEL_KEY, OPTIMIZER_KEY, whole_state
from trainer.storage import open_storage

pytestmark = pytest.mark.slow

TOTAL = EPOCHS + 1
STEP_LOG = "TRAINER_STEP_LOG"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted 2-rank FSDP run on the filesystem: ``run/`` and its step log ``log/``."""
    root = tmp_path_factory.mktemp("fsdp-reference")
    finished = run_trainer(args(root / "run", "fsdp", TOTAL), env={STEP_LOG: str(root / "log")})
    assert finished.returncode == 0, finished.output
    return root


def newest_state(root: str | Path) -> dict[str, dict]:
    """The newest checkpoint's model and optimizer state, whole (read as a resume reads it)."""
    found = CheckpointStore(root).find_resumable()
    assert found is not None and found.checkpoint.sharded_at is not None
    with shards_on_disk(found.checkpoint.sharded_at) as directory:
        return whole_state(directory)


def assert_same_state(got: dict[str, dict], want: dict[str, dict], *, exact: bool) -> None:
    for key in (MODEL_KEY, OPTIMIZER_KEY):
        flat_got, flat_want = _tensors(got[key]), _tensors(want[key])
        assert flat_got.keys() == flat_want.keys(), key
        for name, tensor in flat_want.items():
            if exact:
                assert torch.equal(flat_got[name], tensor), name
            else:
                assert torch.allclose(flat_got[name], tensor, atol=TOLERANCE), name


def _tensors(tree: object, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    if isinstance(tree, dict):
        found: dict[str, torch.Tensor] = {}
        for key, value in tree.items():
            found.update(_tensors(value, f"{prefix}.{key}"))
        return found
    return {}


# The run's checkpoints (every 3 steps, and at each epoch's end), in order.
SCHEDULE = ("checkpoint-e000000-s000003.dcp", "checkpoint-e000000-s000006.dcp")
AFTER_TWO = "checkpoint-e000001-s000000.dcp"


def killed_while_held(root: str, log: Path, *, commits: int) -> str:
    """Run 2 ranks in the background; once ``commits`` checkpoints are committed, the next
    one's upload on rank 0 is held (the hold hook: its bytes out, the upload not completed)
    while the other rank's shard is already in the bucket; SIGKILL everything then. Returns
    the name of the checkpoint whose upload the kill interrupted."""
    held = (*SCHEDULE, AFTER_TWO)[commits]
    hooks = {HOLD_AFTER_ENV: str(commits), STEP_LOG: str(log)}
    job = Background(args(root, "fsdp", TOTAL), log.with_suffix(".out"), env=hooks)
    wait_until(lambda: "checkpoint commit held" in job.log.read_text(), "an upload held")
    committed = CheckpointStore(root).manifest()
    assert [entry.file for entry in committed] == list(SCHEDULE[:commits])
    storage = open_storage(root)
    wait_until(lambda: storage.exists(f"{held}/__1_0.distcp"), "rank 1's shard uploaded")
    job.kill_all()
    job.wait()
    assert CheckpointStore(root).manifest() == committed, "a committed checkpoint was lost"
    assert not storage.exists(f"{held}/.metadata"), "rank 0's upload should have been cut"
    return held


def test_a_kill_during_an_upload_loses_nothing_and_resumes_bit_for_bit(
    s3_bucket: str, reference: Path, tmp_path: Path
) -> None:
    root = f"s3://{s3_bucket}/runs/killed"
    held = killed_while_held(root, tmp_path / "killed-log", commits=1)
    assert len(verify_all(root)) == 1
    described = inspect_cli(root)
    assert (described["layout"], described["world_size"]) == ("sharded", 2)
    assert (described["epochs_completed"], described["step_in_epoch"]) == (0, 3)

    log = tmp_path / "log"
    finished = run_trainer(args(root, "fsdp", TOTAL), env={STEP_LOG: str(log)})
    assert finished.returncode == 0, finished.output
    assert f"resuming from {root}/checkpoint-e000000-s000003.dcp" in finished.output
    expected = losses_by_step(step_lines(reference / "log"))
    resumed = losses_by_step(step_lines(log))
    assert min(resumed) == (0, 3) and len(resumed) == TOTAL * STEPS - 3
    assert {key: expected[key] for key in resumed} == resumed  # bit for bit
    assert_same_state(newest_state(root), newest_state(reference / "run"), exact=True)
    # The checkpoint the kill cut short was written again, whole, and committed.
    assert any(entry.file == held for entry in CheckpointStore(root).manifest())
    assert len(verify_all(root)) == len(manifest_epochs(root))


def test_a_2_rank_checkpoint_in_a_bucket_resumes_on_4_ranks(
    s3_bucket: str, reference: Path, tmp_path: Path
) -> None:
    root = f"s3://{s3_bucket}/runs/resharded"
    killed_while_held(root, tmp_path / "killed-log", commits=2)

    log = tmp_path / "log"
    finished = run_trainer(args(root, "fsdp", TOTAL), nproc=4, env={STEP_LOG: str(log)})
    assert finished.returncode == 0, finished.output
    assert "the checkpoint was written with world size 2" in finished.output
    expected = losses_by_step(step_lines(reference / "log"))
    resumed = losses_by_step(step_lines(log))
    assert min(resumed) == (0, 6) and len(resumed) == TOTAL * STEPS - 6
    for key, loss in resumed.items():
        assert loss == pytest.approx(expected[key], abs=TOLERANCE), key
    assert inspect_cli(root)["world_size"] == 4
    assert_same_state(newest_state(root), newest_state(reference / "run"), exact=False)


def test_a_corrupt_shard_of_the_newest_checkpoint_falls_back_to_the_previous_one(
    s3_bucket: str, reference: Path, tmp_path: Path
) -> None:
    root = f"s3://{s3_bucket}/runs/corrupt"
    killed_while_held(root, tmp_path / "killed-log", commits=2)
    store = CheckpointStore(root)
    previous, newest = store.manifest()
    shard = f"{newest.file}/__1_0.distcp"
    storage = open_storage(root)
    damaged = bytearray(storage.read_bytes(shard))
    damaged[len(damaged) // 2] ^= 0xFF
    storage.write(shard, lambda sink: sink.write(bytes(damaged)))

    log = tmp_path / "log"
    finished = run_trainer(args(root, "fsdp", TOTAL), env={STEP_LOG: str(log)})
    assert finished.returncode == 0, finished.output
    assert f"{shard} fails its sha256 check" in finished.output
    assert f"resuming from {root}/{previous.file}" in finished.output
    assert storage.exists(f"rejected/{shard}")
    resumed = losses_by_step(step_lines(log))
    expected = losses_by_step(step_lines(reference / "log"))
    assert min(resumed) == (previous.epochs_completed, previous.step_in_epoch)
    assert {key: expected[key] for key in resumed} == resumed  # bit for bit
    assert_same_state(newest_state(root), newest_state(reference / "run"), exact=True)
