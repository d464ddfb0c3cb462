"""Where a run starts: its own newest verified checkpoint, a warm start's source, or scratch;
with which global batch; and what makes a checkpoint directory refuse this run.

A checkpoint resumes on any world size: the data order and the global batch do not depend on
it (``trainer.data``). What it cannot resume is another run: another task, per-rank batch,
dataset or seed (the config fingerprint), another global batch (``--global-batch-size``), or
more ranks than its global batch has samples.

The rule is here once and has two callers. The trainer applies it at start, on the checkpoint
it verified (rank 0 decides, every rank follows). The local runner applies it before any
process starts (:func:`preflight`), from the manifest alone, so a run whose settings do not
match its checkpoints ends in one line instead of a restarted pod. Both read the run through its
storage (``trainer.storage``), whichever backend holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.checkpoint import REJECTED_DIR, CheckpointError, CheckpointStore, locate_checkpoint
from trainer.checkpoint_schema import TrainingCheckpoint
from trainer.cli import TrainConfig
from trainer.distributed import DistContext, broadcast_object

LOG = logging.getLogger("trainer")
WORLD_SIZE = "world_size"
GLOBAL_BATCH = "global_batch_size"


@dataclass(frozen=True)
class Mismatch:
    """What differs between a checkpoint and this run: ``setting`` is a key of
    :meth:`TrainConfig.semantic_config` (``config`` when the checkpoint does not say which:
    then ``saved`` and ``current`` are the fingerprints), ``global_batch_size`` (the run's
    global batch and ``--global-batch-size``), or ``world_size`` (then ``saved`` is the run's
    global batch, the most ranks that can share it, and ``current`` this run's world size)."""

    setting: str
    saved: Any
    current: Any


class ResumeRefusedError(RuntimeError):
    """The checkpoint directory belongs to a different run (config, global batch, format), has
    fewer samples per step than this run has ranks, or cannot be used at all. Permanent: the
    same command fails the same way on every retry. ``mismatch``: what differs, when that is
    the reason."""

    def __init__(self, message: str, mismatch: Mismatch | None = None) -> None:
        super().__init__(message)
        self.mismatch = mismatch


@dataclass(frozen=True)
class ResumePoint:
    """Where training starts. ``location``: this run's own checkpoint to resume, taken
    ``step_in_epoch`` global batches into epoch ``epochs_completed``. ``global_batch``: samples
    per optimizer step, fixed for the run. ``origin``: for a warm start, the checkpoint whose
    weights seed this new run (its location under "path", sha256, epochs, config)."""

    location: str | None
    epochs_completed: int
    step_in_epoch: int
    global_batch: int
    origin: dict[str, Any] | None = None


def new_run_global_batch(config: TrainConfig, world_size: int) -> int:
    """A new run's samples per optimizer step: ``--global-batch-size``, or the per-rank batch
    times the ranks it starts on."""
    return config.global_batch_size or config.batch_size * world_size


def find_mismatch(
    config: TrainConfig,
    world_size: int,
    *,
    saved_fingerprint: str,
    saved_config: Mapping[str, Any] | None,
    saved_global_batch: int | None,
) -> Mismatch | None:
    """The first reason a checkpoint with these saved values cannot be resumed by this run."""
    if saved_fingerprint != config.fingerprint():
        current = config.semantic_config()
        for key, value in current.items():
            if saved_config is not None and key in saved_config and saved_config[key] != value:
                return Mismatch(key, saved_config[key], value)
        return Mismatch("config", saved_fingerprint, config.fingerprint())
    wanted = config.global_batch_size
    if wanted is not None and saved_global_batch is not None and wanted != saved_global_batch:
        return Mismatch(GLOBAL_BATCH, saved_global_batch, wanted)
    global_batch = saved_global_batch or new_run_global_batch(config, world_size)
    if world_size > global_batch:
        return Mismatch(WORLD_SIZE, global_batch, world_size)
    return None


def refusal(
    mismatch: Mismatch,
    path: str,
    config: TrainConfig,
    *,
    saved_fingerprint: str,
    saved_config: Mapping[str, Any] | None,
) -> ResumeRefusedError:
    """The trainer's words for a mismatch, naming its flags and the way out."""
    directory = config.checkpoint_dir
    if mismatch.setting == WORLD_SIZE:
        return ResumeRefusedError(
            f"checkpoint {path} belongs to a run with a global batch of {mismatch.saved} "
            f"samples per step, which {mismatch.current} processes cannot share; resume it "
            f"with 1 to {mismatch.saved} processes in total (nnodes x nproc-per-node)",
            mismatch,
        )
    if mismatch.setting == GLOBAL_BATCH:
        return ResumeRefusedError(
            f"checkpoint {path} belongs to a run with a global batch of {mismatch.saved} "
            f"samples per step, but this run asks for --global-batch-size {mismatch.current}; "
            f"pass {mismatch.saved} (or leave the flag out) to resume it on any number of "
            "processes, or, to continue from its weights with the new global batch, start a "
            f"new run with --init-from {directory} --checkpoint-dir NEW_DIR",
            mismatch,
        )
    saved = dict(saved_config) if saved_config is not None else "(not recorded)"
    return ResumeRefusedError(
        f"checkpoint {path} was written with config {saved} (fingerprint {saved_fingerprint}), "
        f"but this run has config {config.semantic_config()} (fingerprint {config.fingerprint()}); "
        "use the same --task/--batch_size/--dataset-size/--seed to resume it, or, to continue "
        f"from its weights with the new settings, start a new run with --init-from {directory} "
        "--checkpoint-dir NEW_DIR (job.initFrom and a new job.name in a stack)",
        mismatch,
    )


def decide_resume(
    ctx: DistContext, config: TrainConfig
) -> tuple[ResumePoint, TrainingCheckpoint | None]:
    """Rank 0 decides, everyone follows: ranks never disagree about whether/where to resume.
    Rank 0 also gets the state it verified, so the restore does not read the file again."""
    decision: dict[str, Any] = {}
    state: TrainingCheckpoint | None = None
    if ctx.is_main:
        try:
            point, state = choose_resume_point(ctx, config)
            decision = {"point": point}
        except (ResumeRefusedError, CheckpointError) as error:
            decision = {"error": str(error)}
        except OSError as error:
            decision = {"error": f"{type(error).__name__}: {error}"}
    decision = broadcast_object(ctx, decision)  # type: ignore[assignment]
    if "error" in decision:
        raise ResumeRefusedError(decision["error"])
    return decision["point"], state


def choose_resume_point(
    ctx: DistContext, config: TrainConfig
) -> tuple[ResumePoint, TrainingCheckpoint | None]:
    """Rank 0's decision (creates the root, sets aside corrupt checkpoints)."""
    directory = config.checkpoint_dir
    store = CheckpointStore(directory, config.keep)
    if config.create_bucket:
        store.storage.create_bucket()
    store.storage.create()
    store.remove_partial_writes()
    found = store.find_resumable()
    if found is None:
        if config.init_from is not None:
            return warm_start_point(config, ctx.world_size)
        _refuse_more_ranks_than_samples(config, ctx.world_size)
        LOG.info("no checkpoint in %s: starting from scratch", directory)
        return ResumePoint(None, 0, 0, new_run_global_batch(config, ctx.world_size)), None
    if config.init_from is not None:
        LOG.info(
            "%s already has this run's checkpoints: resuming them (--init-from %s only seeds a "
            "fresh run)",
            directory,
            config.init_from,
        )
    saved = found.checkpoint
    saved_global_batch = saved.run_global_batch()
    mismatch = find_mismatch(
        config,
        ctx.world_size,
        saved_fingerprint=saved.config_fingerprint,
        saved_config=saved.config,
        saved_global_batch=saved_global_batch,
    )
    if mismatch is not None:
        raise refusal(
            mismatch,
            found.location,
            config,
            saved_fingerprint=saved.config_fingerprint,
            saved_config=saved.config,
        )
    if found.skipped:
        LOG.warning(
            "resuming from %s, an OLDER checkpoint, because: %s",
            found.location,
            "; ".join(found.skipped),
        )
        moved = store.set_aside(found)
        LOG.warning(
            "removed the unusable checkpoint(s) from the manifest and moved them to %s: %s",
            store.storage.location_of(REJECTED_DIR),
            ", ".join(moved) or "(files already gone)",
        )
    LOG.info("resuming from %s (%d epochs completed)", found.location, found.entry.epochs_completed)
    global_batch = saved_global_batch or new_run_global_batch(config, ctx.world_size)
    step = found.entry.step_in_epoch
    if saved.epoch_position is not None and saved.epoch_position != min(
        step * global_batch, config.dataset_size
    ):
        raise CheckpointError(
            f"{found.location} says it is {saved.epoch_position} samples into its epoch, which "
            f"is not step {step} of {global_batch} samples its manifest entry names"
        )
    return ResumePoint(found.location, found.entry.epochs_completed, step, global_batch), saved


def _refuse_more_ranks_than_samples(config: TrainConfig, world_size: int) -> None:
    global_batch = new_run_global_batch(config, world_size)
    if world_size > global_batch:
        raise ResumeRefusedError(
            f"--global-batch-size {global_batch} is fewer samples per step than the "
            f"{world_size} processes of this run; pass at least {world_size}, or run on 1 to "
            f"{global_batch} processes",
            Mismatch(WORLD_SIZE, global_batch, world_size),
        )


def warm_start_point(
    config: TrainConfig, world_size: int
) -> tuple[ResumePoint, TrainingCheckpoint]:
    """A new run seeded from the checkpoint --init-from names: a file (checked against its
    root's manifest when it is listed there) or a run's root's newest verified checkpoint."""
    source = config.init_from
    assert source is not None
    where = f"--init-from {source}"
    located = locate_checkpoint(source)
    if located is None:
        raise CheckpointError(f"{where}: no such file or directory")
    storage, name = located
    if name is None:
        found = CheckpointStore(storage).find_resumable()
        if found is None:
            raise CheckpointError(f"{where}: no committed checkpoint there (no manifest.json)")
        location, state, sha256 = found.location, found.checkpoint, found.entry.sha256
    else:
        try:
            state, sha256 = CheckpointStore(storage).read_file(name)
        except CheckpointError as error:
            raise CheckpointError(f"{where}: {error}") from error
        location = storage.location_of(name)
    origin = {
        "path": location,
        "sha256": sha256,
        "epochs_completed": state.epochs_run,
        "config": state.config,
        "config_fingerprint": state.config_fingerprint,
        "optimizer_state": config.init_optimizer,
    }
    LOG.info(
        "warm start: new run in %s from the weights of %s (%d epochs completed, config %s)%s",
        config.checkpoint_dir,
        location,
        origin["epochs_completed"],
        origin["config"],
        " and its optimizer state" if config.init_optimizer else "",
    )
    _refuse_more_ranks_than_samples(config, world_size)
    return ResumePoint(None, 0, 0, new_run_global_batch(config, world_size), origin), state


def preflight(config: TrainConfig, world_size: int) -> None:
    """Raise :class:`ResumeRefusedError` for what :func:`choose_resume_point` would refuse on
    ``world_size`` processes (for a job whose size varies, its largest), without creating,
    moving or verifying anything: the root cannot be used, its newest committed checkpoint
    belongs to another run (from the manifest; the object is opened only to name what differs)
    or has fewer samples per step than ranks, or a warm start's source root holds no committed
    checkpoint. A corrupt newest checkpoint is no reason to refuse: the trainer falls back to
    an older one."""
    directory = config.checkpoint_dir
    try:
        store = CheckpointStore(directory)
        problem = store.storage.refusal(create_bucket=config.create_bucket)
        if problem is not None:
            raise ResumeRefusedError(f"--checkpoint-dir {directory} {problem}")
        entries = store.manifest()
        if not entries:
            source = config.init_from
            located = locate_checkpoint(source) if source is not None else None
            if (
                located is not None
                and located[1] is None
                and not CheckpointStore(located[0]).manifest()
            ):
                raise ResumeRefusedError(
                    f"--init-from {source}: no committed checkpoint there (no manifest.json)"
                )
            _refuse_more_ranks_than_samples(config, world_size)
            return
    except (CheckpointError, OSError) as error:
        raise ResumeRefusedError(str(error)) from None
    newest = entries[-1]
    path = store.storage.location_of(newest.file)
    saved_config: Mapping[str, Any] | None = None
    if newest.fingerprint != config.fingerprint():
        try:  # mapped, not read: only the small CONFIG entry is needed, to say what differs
            saved_config = store.load(newest.file).config
        except Exception as error:  # a file the trainer would set aside; the fingerprint decides
            LOG.debug("cannot read the config of %s: %s", path, error)
    saved_global_batch = newest.global_batch
    if saved_global_batch is None and newest.fingerprint == config.fingerprint():
        saved_global_batch = config.batch_size * newest.world_size  # a version 1 checkpoint
    mismatch = find_mismatch(
        config,
        world_size,
        saved_fingerprint=newest.fingerprint,
        saved_config=saved_config,
        saved_global_batch=saved_global_batch,
    )
    if mismatch is not None:
        raise refusal(
            mismatch, path, config, saved_fingerprint=newest.fingerprint, saved_config=saved_config
        )
