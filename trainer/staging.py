"""Staging: the private CPU copy of a training state that a background checkpoint write works
from, so training can go on changing its tensors meanwhile. The copy reuses the buffers of the
previous one (no allocation or page faults per save), can live in shared memory (a writer
process reads it without another copy) and is split over threads. The checkpoint writer
(``trainer.async_writer``) decides when to stage; this module is only how.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

# Staging copies are split into pieces of this size for the copy threads, at most
# STAGING_THREADS of them (fewer where this process may use fewer cores).
STAGING_PIECE_BYTES = 32 << 20
STAGING_THREADS = 4


def copy_to_cpu(
    value: Any,
    reuse: Any = None,
    *,
    shared: bool = False,
    deferred: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> Any:
    """A private CPU copy, so training can keep mutating its tensors while a thread writes.

    ``reuse`` is the previous copy (already committed): tensors of the same shape and dtype are
    copied into it instead of freshly allocated, which avoids page-faulting a large new buffer
    on every checkpoint and keeps the training loop's stall to a memcpy. ``shared`` allocates
    new buffers in shared memory, so a writer process can read them without another copy.
    ``deferred``: copies into reused buffers are appended there (destination, source) instead
    of run, so the caller can run them in parallel (:func:`copy_in_parallel`)."""
    if isinstance(value, torch.Tensor):
        source = value.detach()
        if (
            isinstance(reuse, torch.Tensor)
            and reuse.shape == source.shape
            and reuse.dtype == source.dtype
            and reuse.device.type == "cpu"
        ):
            if deferred is None:
                return reuse.copy_(source)
            deferred.append((reuse, source))
            return reuse
        if not shared:
            return source.to("cpu", copy=True)
        return _shared_empty(source).copy_(source)
    if isinstance(value, dict):
        old = reuse if isinstance(reuse, dict) else {}
        return {
            key: copy_to_cpu(item, old.get(key), shared=shared, deferred=deferred)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        old_items = list(reuse) if isinstance(reuse, list | tuple) else []
        old_items += [None] * (len(value) - len(old_items))
        copied = [
            copy_to_cpu(item, old, shared=shared, deferred=deferred)
            for item, old in zip(value, old_items, strict=False)
        ]
        return copied if isinstance(value, list) else tuple(copied)
    return value


def copy_in_parallel(
    copies: list[tuple[torch.Tensor, torch.Tensor]], pool: ThreadPoolExecutor | None
) -> None:
    """Run (destination, source) copies, large ones split into pieces spread over ``pool``'s
    threads (``Tensor.copy_`` releases the GIL). One core's memcpy does not saturate memory
    bandwidth, and while rank 0 stages, the other ranks wait for it in their next collective,
    so the cores this uses are idle anyway."""
    if pool is None:
        for destination, source in copies:
            destination.copy_(source)
        return
    pieces: list[tuple[torch.Tensor, torch.Tensor]] = []
    for destination, source in copies:
        if not (destination.is_contiguous() and source.is_contiguous()):
            pieces.append((destination, source))
            continue
        flat_destination, flat_source = destination.view(-1), source.view(-1)
        step = max(STAGING_PIECE_BYTES // destination.element_size(), 1)
        for start in range(0, destination.numel(), step):
            length = min(step, destination.numel() - start)
            pieces.append(
                (flat_destination.narrow(0, start, length), flat_source.narrow(0, start, length))
            )
    for _ in pool.map(lambda piece: piece[0].copy_(piece[1]), pieces):
        pass


def _shared_empty(like: torch.Tensor) -> torch.Tensor:
    """An uninitialised shared-memory tensor shaped like ``like``, allocated in shared memory
    directly: ``empty().share_memory_()`` allocates private memory, faults it in and copies
    it into a shared segment, three passes over a buffer the caller overwrites anyway."""
    nbytes = like.nelement() * like.element_size()
    try:
        storage = torch.UntypedStorage._new_shared(nbytes)
    except (AttributeError, TypeError):  # a torch without the private constructor
        return torch.empty(like.shape, dtype=like.dtype, device="cpu").share_memory_()
    return torch.empty(0, dtype=like.dtype).set_(storage, 0, like.shape)


def move_to_shared_memory(value: Any) -> None:
    """Move every tensor of a snapshot into shared memory (a no-op once it is there)."""
    if isinstance(value, torch.Tensor):
        value.share_memory_()
    elif isinstance(value, dict):
        for item in value.values():
            move_to_shared_memory(item)
    elif isinstance(value, list | tuple):
        for item in value:
            move_to_shared_memory(item)


def state_bytes(value: Any) -> int:
    """Bytes of tensor data in a (nested) state: what a save copies and writes."""
    if isinstance(value, torch.Tensor):
        return value.nelement() * value.element_size()
    if isinstance(value, dict):
        return sum(state_bytes(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(state_bytes(item) for item in value)
    return 0
