"""The sharded checkpoint format (``--parallelism fsdp``): a directory holding the model and
optimizer state as torch.distributed.checkpoint (DCP) files, written by every rank for its own
shards, and ``trainer.pt``, the rest of the training state (``trainer.checkpoint_schema``, with
an empty model state), written by rank 0::

    checkpoint-e000002-s000004.dcp/
        __0_0.distcp  __1_0.distcp ...   each rank's shards (DCP's files)
        .metadata                        DCP's index: which shard of which tensor is where
        trainer.pt                       epochs, data position, RNG streams, config, ...

DCP reshards on load: a checkpoint written by N ranks loads on M, into an FSDP model or a plain
one (whole tensors on every rank), which is how DDP and FSDP runs resume each other's
checkpoints. How a directory is committed, verified and listed in the manifest is the store's
(``trainer.checkpoint``); when it is written, the sharded writer's (``trainer.sharded_writer``).
This module is what the files hold and how a state goes into or comes out of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

SHARDED_SUFFIX = ".dcp"
META_NAME = "trainer.pt"
INDEX_NAME = ".metadata"  # DCP's index, written by the coordinating rank (0)
# The top-level keys of the DCP state: a tensor's DCP name is KEY.FQN (e.g. model.head.weight).
MODEL_KEY = "model"
OPTIMIZER_KEY = "optimizer"
_HASH_THREADS = 4


def is_sharded(name: str) -> bool:
    """Whether a checkpoint's name is a sharded checkpoint's directory."""
    return name.endswith(SHARDED_SUFFIX)


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The model and optimizer state as DCP saves and loads it: keyed by parameter name (FQN),
    each tensor this rank's shard of it (an FSDP model) or the whole of it (a plain one). An
    optimizer without state yet (before its first step) gets it created, zero, so a load has
    somewhere to put the saved state."""
    return {
        MODEL_KEY: get_model_state_dict(model),
        OPTIMIZER_KEY: get_optimizer_state_dict(model, optimizer),
    }


def load_sharded(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    directory: str | Path,
    *,
    with_optimizer: bool = True,
    process_group: Any = None,
) -> None:
    """Load a sharded checkpoint's model (and optimizer) state into ``model``, whatever the
    world size that wrote it. Collective: every rank calls it."""
    state = training_state(model, optimizer)
    if not with_optimizer:
        del state[OPTIMIZER_KEY]
    dcp.load(state, checkpoint_id=str(directory), process_group=process_group)
    set_model_state_dict(model, state[MODEL_KEY])
    if with_optimizer:
        set_optimizer_state_dict(model, optimizer, state[OPTIMIZER_KEY])


def load_whole(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state: Mapping[str, torch.Tensor],
    optimizer_state: Mapping[str, Any] | None,
) -> None:
    """Load a whole-file (DDP) checkpoint's state into a sharded model: each rank keeps its
    shards of the whole tensors. ``optimizer_state`` is ``Optimizer.state_dict()``'s, whose
    parameters are numbered in the optimizer's order; None leaves the optimizer as it is."""
    whole = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, dict(model_state), options=whole)
    if optimizer_state is None:
        return
    name_of = {id(param): name for name, param in model.named_parameters()}
    names = [name_of[id(param)] for group in optimizer.param_groups for param in group["params"]]
    by_name = {
        "state": {names[int(index)]: slots for index, slots in optimizer_state["state"].items()},
        "param_groups": [
            {**group, "params": [names[int(index)] for index in group["params"]]}
            for group in optimizer_state["param_groups"]
        ],
    }
    set_optimizer_state_dict(model, optimizer, by_name, options=whole)


def whole_state(directory: str | Path) -> dict[str, Any]:
    """Every tensor of a sharded checkpoint, whole, read in this process alone (no process
    group): ``{"model": {FQN: tensor}, "optimizer": {...}}``. For inspection and consolidation;
    it holds the whole state in memory."""
    # What torch.distributed.checkpoint.format_utils.dcp_to_torch_save does, without the file.
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    _load_state_dict(
        state,
        storage_reader=dcp.FileSystemReader(str(directory)),
        planner=_EmptyStateDictLoadPlanner(),
        no_dist=True,
    )
    return state


def hash_file(path: Path) -> dict[str, Any]:
    """``{"sha256": hex, "size": bytes}`` of one file, as the manifest lists a shard."""
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
        size = handle.tell()
    return {"sha256": digest, "size": size}


def hash_files(directory: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{name: {"sha256": hex, "size": bytes}}`` of files in ``directory``, hashed in threads
    (hashlib releases the GIL). FileNotFoundError for a missing one."""
    wanted = sorted(names)
    with ThreadPoolExecutor(min(_HASH_THREADS, max(len(wanted), 1))) as pool:
        hashed = pool.map(lambda name: hash_file(directory / name), wanted)
        return dict(zip(wanted, hashed, strict=True))


def indexed_files(directory: Path) -> set[str]:
    """The files of a sharded checkpoint as its DCP index (``.metadata``, in ``directory``)
    names them, with the index and ``trainer.pt``: how a checkpoint that no manifest lists is
    fetched from storage that cannot list a folder."""
    metadata = dcp.FileSystemReader(str(directory)).read_metadata()
    shards = {info.relative_path for info in (metadata.storage_data or {}).values()}
    return {*shards, INDEX_NAME, META_NAME}


def listing_sha256(files: Mapping[str, Mapping[str, Any]]) -> str:
    """One digest for a sharded checkpoint (its manifest entry's ``sha256``): over every file's
    name, size and sha256, so it changes exactly when one of them does."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\t{files[name]['size']}\t{files[name]['sha256']}\n".encode())
    return digest.hexdigest()
