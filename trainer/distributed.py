"""Process-group lifetime: pick device/backend from what the machine has, initialise with a
bounded timeout, tear down with a barrier so no rank leaves while another still talks, and end
the process without the interpreter's finalization (see :func:`run_and_exit`)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist

LOG = logging.getLogger("trainer")


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def lost_a_peer(error: BaseException) -> bool:
    """Whether `error` is a collective's (or the rendezvous store's) failure to reach another
    rank, rather than a fault of this rank's own: torch's DistError family (NCCL, the TCP store),
    and gloo's transport errors, which torch raises as a plain RuntimeError whose message names
    the transport's source file ("Connection reset by peer", "Connection closed by peer", a
    receive that timed out)."""
    if isinstance(error, dist.DistError):
        return True
    return isinstance(error, RuntimeError) and "gloo/transport/" in str(error)


def select_device(local_rank: int) -> tuple[torch.device, str]:
    """CUDA + NCCL when this process can see a GPU, otherwise CPU + gloo."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index), "nccl"
    return torch.device("cpu"), "gloo"


def configure_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format=f"%(asctime)s [rank {rank}] %(levelname)s %(message)s",
        force=True,
    )


def init_distributed(timeout_s: float) -> DistContext:
    """Join the process group torchrun describes in the environment (a single process when run
    without torchrun, which keeps `python -m trainer` usable for quick local checks)."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device, backend = select_device(local_rank)
    # Without torchrun there is nobody to rendezvous with: an in-memory store avoids a port.
    store = dist.HashStore() if "MASTER_ADDR" not in os.environ and world_size == 1 else None
    dist.init_process_group(
        backend=backend,
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    return DistContext(rank, world_size, local_rank, device, backend)


def barrier(ctx: DistContext) -> None:
    if ctx.device.type == "cuda":
        dist.barrier(device_ids=[ctx.device.index])
    else:
        dist.barrier()


def shutdown(ctx: DistContext) -> None:
    """Barrier first so a fast rank cannot tear down the group while others still use it."""
    if not dist.is_initialized():
        return
    try:
        barrier(ctx)
    finally:
        dist.destroy_process_group()


def broadcast_object(ctx: DistContext, value: object) -> object:
    """Rank 0's value on every rank (any picklable object)."""
    holder = [value if ctx.is_main else None]
    dist.broadcast_object_list(holder, src=0, device=ctx.device)
    return holder[0]


def all_gather_object(ctx: DistContext, value: object) -> list[object]:
    gathered: list[object] = [None] * ctx.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def run_and_exit(entry: Callable[[], int]) -> NoReturn:
    """Run a process's main function, then end the process with ``os._exit`` once its output
    is flushed, skipping the interpreter's finalization.

    Why: gloo runs collectives on worker threads of its own, and such a thread drops its
    reference to a finished collective a moment after the caller's wait returned. When that was
    the last reference to a tensor created from Python (``all_gather_object`` and
    ``broadcast_object_list`` make them), the thread takes the GIL to release it. Once
    finalization has begun, CPython ends any thread that takes the GIL with ``pthread_exit``,
    which cannot unwind through gloo's C++ frames: ``std::terminate``, "terminate called
    without an active exception", SIGABRT, exit code 134, after a run that had finished (or
    stopped with its checkpoint committed). torch guards that release only with
    ``Py_IsInitialized``, which stays true during finalization (pytorch/pytorch#190489). A
    process group that ``destroy_process_group`` has shut down keeps those threads, so the
    window exists at every exit; without finalization there is no window.

    Everything this process owns is closed before ``entry`` returns (the checkpoint writer and
    its threads, the process group); an exception is printed as Python would print it and
    exits 1, and ``record`` has written torchrun's error file by then."""
    try:
        code = entry()
    except SystemExit as stop:  # --help, or a library's sys.exit
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except KeyboardInterrupt:  # before the trainer's own SIGINT handler was installed
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing left to say
            stream.flush()
    os._exit(code)
