"""Peak memory per rank, FSDP against DDP, on the CPU: the same model (``bench.gpu_tasks:
sharded_mlp``, Adam) trained for a few steps by 4 gloo ranks under each parallelism, through
the trainer's own ``trainer.parallelism.parallelize``. Prints, per parallelism, each rank's
peak resident memory while training above what the rank held before the model was built, and
FSDP's share of DDP's. A measurement, not a test: nothing asserts on it (the issue's target is
FSDP at most 0.35x of DDP on 4 ranks).

The peak is the kernel's high-water mark of the process's resident set (VmHWM), reset once the
model is built and sharded (``/proc/self/clear_refs``), so it covers what training holds:
weights, gradients, optimizer state, DDP's gradient buckets or FSDP's gathered block, and the
activations. Building the model is left out: the trainer builds it whole on the CPU before
sharding it, before the first step. Two things keep the figure to tensors: the ranks run with a
fixed malloc mmap threshold (``MALLOC_MMAP_THRESHOLD_``), so a freed tensor's memory leaves the
resident set at once instead of lingering in the heap, and the start is taken after a tiny
warm-up step has loaded the kernels and allocator pools both runs need.

Usage: python bench/fsdp_memory.py [--ranks 4] [--width 1024] [--depth 8] [--steps 3]
(Linux only: it reads /proc.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def resident_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (the peak since the last reset) of this process, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(parallelism: str, steps: int, out: Path) -> None:
    """One rank under torchrun: build, parallelize, reset the peak, train, report."""
    import torch

    from bench.gpu_tasks import sharded_mlp
    from trainer.distributed import init_distributed, shutdown
    from trainer.parallelism import device_for_building, parallelize
    from trainer.task import TaskContext

    ctx = init_distributed(300)
    warm_up = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 8), torch.nn.GELU())
    warm_up_optimizer = torch.optim.Adam(warm_up.parameters())
    warm_up(torch.rand(2, 8)).sum().backward()
    warm_up_optimizer.step()
    del warm_up, warm_up_optimizer
    before = resident_mb("VmRSS")
    task = sharded_mlp(TaskContext(0, 64, device_for_building(parallelism, ctx.device)))
    model = parallelize(task, ctx, parallelism)
    parameters = sum(param.numel() for param in task.model.parameters())  # this rank's
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    batch = task.inputs[: 8 * (ctx.rank + 1) : ctx.rank + 1]
    targets = task.targets[: 8 * (ctx.rank + 1) : ctx.rank + 1]
    for _ in range(steps):
        loss = task.loss_fn(model(batch), targets)
        task.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        task.optimizer.step()
    local = parameters
    if parallelism == "fsdp":
        local = sum(param.to_local().numel() for param in task.model.parameters())
    result = {
        "rank": ctx.rank,
        "peak_mb": round(resident_mb("VmHWM") - before, 1),
        "parameters_held": local,
        "loss": float(loss.detach()),
    }
    (out / f"{parallelism}-{ctx.rank}.json").write_text(json.dumps(result))
    shutdown(ctx)


def measure(parallelism: str, ranks: int, steps: int, out: Path, env: dict[str, str]) -> list:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(ranks),
        __file__,
        "worker",
        parallelism,
        "--steps",
        str(steps),
        "--out",
        str(out),
    ]
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return [json.loads((out / f"{parallelism}-{rank}.json").read_text()) for rank in range(ranks)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("worker")
    one.add_argument("parallelism", choices=["ddp", "fsdp"])
    one.add_argument("--steps", type=int, required=True)
    one.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    if args.command == "worker":
        worker(args.parallelism, args.steps, args.out)
        return 0
    from bench.gpu_tasks import FSDP_DEPTH_ENV, FSDP_WIDTH_ENV

    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "MALLOC_MMAP_THRESHOLD_": "65536",
        FSDP_WIDTH_ENV: str(args.width),
        FSDP_DEPTH_ENV: str(args.depth),
    }
    with tempfile.TemporaryDirectory() as scratch:
        ddp = measure("ddp", args.ranks, args.steps, Path(scratch), env)
        fsdp = measure("fsdp", args.ranks, args.steps, Path(scratch), env)
    print(f"{args.ranks} ranks, {args.depth} blocks of width {args.width}, Adam, CPU (gloo)")
    for name, rows in (("ddp", ddp), ("fsdp", fsdp)):
        peaks = ", ".join(f"{row['peak_mb']:.0f}" for row in rows)
        held = rows[0]["parameters_held"]
        print(f"{name}: peak MiB per rank above start: {peaks}; parameters held: {held}")
    ratio = max(row["peak_mb"] for row in fsdp) / max(row["peak_mb"] for row in ddp)
    print(f"fsdp / ddp (largest rank): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
