"""The trainer on a GPU machine, in one go (``bench/gpu_check.sh`` runs it): every figure to one
JSON file, a summary on stdout. Nothing here asserts on timing; the figures are for
docs/explanation/benchmarks.md.

Phases, each a real ``torchrun -m trainer`` run unless said otherwise:

1. ``default``: a DDP run of the default task (NCCL on CUDA, gloo on the CPU).
2. ``large``: a DDP run of a model with a ``--state-mb`` training state (weights plus momentum,
   ``bench.gpu_tasks:large_state``), checkpointing every few steps (``--save-every-steps``).
3. ``stall`` (in this process, one rank): the same model training on the device, a checkpoint
   every few steps, the loop time lost per save with the background writer against a
   synchronous save of the same state.
4. ``resume``: the default task SIGKILLed after a mid-epoch checkpoint, resumed with the same
   command; its final weights against an uninterrupted run's, bit for bit.
5. ``steps``: the trainer's loop against a bare DDP loop (same model, data order and batches, no
   checkpoints, no stop agreement), alternated, step time per variant and their ratio.
6. ``fsdp``: the trainer under ``--parallelism fsdp`` (bf16 parameters, fp32 reduction on CUDA)
   on ``bench.gpu_tasks:sharded_mlp`` (268M parameters, Adam), a sharded checkpoint every few
   steps; per rank: step time with and without a write in flight, the loop's stall per save
   (background) and one synchronous save's, peak device memory. With several GPUs it runs on 1
   rank and on all of them, so the memory per rank is seen falling as ranks grow; the last
   checkpoint is verified file by file (``describe``).

NCCL needs a GPU per rank, so the DDP runs use min(2, GPUs) processes on CUDA. ``--smoke``
shrinks everything to seconds: CI runs it on the CPU, which proves the script, not the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gpu_tasks import (
    FSDP_DEPTH_ENV,
    FSDP_WIDTH_ENV,
    STATE_MB_ENV,
    hidden_width,
    large_state,
)
from machine import procs
from trainer.async_writer import CheckpointWriter
from trainer.checkpoint import CheckpointStore, describe
from trainer.checkpoint_schema import TrainingCheckpoint
from trainer.cli import TrainConfig
from trainer.data import GlobalBatches
from trainer.distributed import (
    DistContext,
    all_gather_object,
    init_distributed,
    run_and_exit,
    shutdown,
)
from trainer.loop import Trainer
from trainer.metrics import EpochLoss, read_metrics
from trainer.resume import ResumePoint
from trainer.stop_agreement import StopAgreement
from trainer.task import TaskContext, regression_task

ROOT = Path(__file__).resolve().parent.parent
LARGE_TASK = "bench.gpu_tasks:large_state"
FSDP_TASK = "bench.gpu_tasks:sharded_mlp"


class Sizes:
    """How much each phase does: the real check, or the CI smoke test."""

    def __init__(self, smoke: bool, state_mb: int) -> None:
        self.state_mb = 8 if smoke else state_mb
        self.default = ("3", "1", "--dataset-size", "512" if smoke else "65536")
        self.large = ("2", "1", "--dataset-size", "256" if smoke else "4096", "--batch_size", "32")
        self.large_every_steps = "2" if smoke else "16"
        self.stall_saves = 2 if smoke else 4
        self.stall_steps_between = 2 if smoke else 20
        self.resume = ("4", "1", "--dataset-size", "256" if smoke else "16384")
        self.steps_epochs = 2 if smoke else 4
        self.steps_dataset = 512 if smoke else 65536
        self.steps_rounds = 1 if smoke else 3
        # fsdp: the model's blocks and width, samples per rank per step, steps, a save every.
        self.fsdp_model = ("2", "64") if smoke else ("16", "4096")
        self.fsdp_batch = 8 if smoke else 32
        self.fsdp_steps = 8 if smoke else 96
        self.fsdp_save_every = 4 if smoke else 24


def device_info() -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda": cuda,
        "gpus": torch.cuda.device_count() if cuda else 0,
        "backend": "nccl" if cuda else "gloo",
    }
    if cuda:
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda_version"] = torch.version.cuda
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return info


def processes(info: dict[str, Any]) -> int:
    """NCCL refuses two ranks on one GPU; on the CPU two gloo ranks share the cores."""
    return min(2, info["gpus"]) if info["cuda"] else 2


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    return {**env, **(extra or {})}


def torchrun(nproc: int, program: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trainer.launch",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        *program,
    ]


def run(command: list[str], log: Path, env: dict[str, str], timeout: float = 900) -> float:
    """Run to the end; its output to ``log``; the wall seconds. A failure stops the check."""
    started = time.perf_counter()
    with log.open("w") as output:
        done = subprocess.run(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, timeout=timeout
        )
    if done.returncode != 0:
        raise SystemExit(f"gpu_check: {' '.join(command)} failed ({done.returncode}); see {log}")
    return time.perf_counter() - started


def training_figures(directory: Path, wall_s: float) -> dict[str, Any]:
    rows = read_metrics(directory)
    steady = rows[1:] or rows
    info = describe(directory)
    return {
        "wall_s": round(wall_s, 2),
        "epochs": len(rows),
        "samples_per_s": round(statistics.median(row["samples_per_s"] for row in steady), 1),
        "final_loss": rows[-1]["loss"],
        "checkpoint_bytes": info["size"],
        "world_size": info["world_size"],
        "checkpoints_kept": len(CheckpointStore(directory).manifest()),
    }


def default_run(work: Path, nproc: int, sizes: Sizes) -> dict[str, Any]:
    directory = work / "default"
    program = ["-m", "trainer", *sizes.default, "--checkpoint-dir", str(directory)]
    wall = run(torchrun(nproc, program), work / "default.log", environment())
    return training_figures(directory, wall)


def large_run(work: Path, nproc: int, sizes: Sizes) -> dict[str, Any]:
    directory = work / "large"
    program = ["-m", "trainer", *sizes.large, "--checkpoint-dir", str(directory)]
    program += ["--task", LARGE_TASK, "--save-every-steps", sizes.large_every_steps]
    env = environment({STATE_MB_ENV: str(sizes.state_mb)})
    wall = run(torchrun(nproc, program), work / "large.log", env)
    return {**training_figures(directory, wall), "state_mb": sizes.state_mb}


def stall(work: Path, sizes: Sizes) -> dict[str, Any]:
    """Loop time lost per save, ours against a synchronous save, the model training on the
    device between saves (one process: a save's cost is rank 0's)."""
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    os.environ[STATE_MB_ENV] = str(sizes.state_mb)
    task = large_state(TaskContext(0, 4096, device))
    inputs, targets = task.inputs.to(device), task.targets.to(device)

    def steps(count: int) -> float:
        started = time.perf_counter()
        for step in range(count):
            batch = torch.arange(step * 32, step * 32 + 32, device=device) % inputs.shape[0]
            loss = task.loss_fn(task.model(inputs[batch]), targets[batch])
            task.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            task.optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    def state() -> dict[str, Any]:
        return TrainingCheckpoint(
            model_state=task.model.state_dict(),
            epochs_run=0,
            world_size=1,
            config_fingerprint="gpu-check",
            optimizer_state=task.optimizer.state_dict(),
        ).to_state()

    steps(2)  # the optimizer's momentum exists from here on
    results: dict[str, Any] = {}
    for name, background in (("ours", True), ("synchronous", False)):
        with tempfile.TemporaryDirectory(dir=work) as scratch:
            writer = CheckpointWriter(CheckpointStore(Path(scratch)), background=background)
            writer.prepare(state())
            deadline = time.perf_counter() + 30
            while writer.writer_started and not writer.writer_ready():
                if time.perf_counter() > deadline:
                    break
                steps(1)
            between = sizes.stall_steps_between
            before = steps(between * sizes.stall_saves)
            blocked, started = 0.0, time.perf_counter()
            for index in range(sizes.stall_saves):
                steps(between)
                save_started = time.perf_counter()
                writer.save(state(), epochs_completed=0, step_in_epoch=index + 1)
                blocked += time.perf_counter() - save_started
            elapsed = time.perf_counter() - started
            writer.close()
            after = steps(between * sizes.stall_saves)
            control = (before + after) / 2
            results[name] = {
                "lost_per_save_s": round((elapsed - control) / sizes.stall_saves, 4),
                "save_blocks_s": round(blocked / sizes.stall_saves, 4),
                "mode": writer.last_mode,
            }
    results["state_mb"] = sizes.state_mb
    results["steps_between_saves"] = sizes.stall_steps_between
    # The blocking time is exact; the loop time lost carries the control windows' noise.
    results["blocks_ratio"] = round(
        results["ours"]["save_blocks_s"] / results["synchronous"]["save_blocks_s"], 3
    )
    return results


def resume(work: Path, nproc: int, sizes: Sizes) -> dict[str, Any]:
    """SIGKILL after a mid-epoch checkpoint (every commit held 1 s by the write-delay hook so
    the kill lands mid-run), resume with the same command, compare with an uninterrupted run."""
    program = [*sizes.resume, "--save-every-steps", "3", "--keep", "20"]
    reference, killed = work / "uninterrupted", work / "killed"
    run(
        torchrun(nproc, ["-m", "trainer", *program, "--checkpoint-dir", str(reference)]),
        work / "uninterrupted.log",
        environment(),
    )
    command = torchrun(nproc, ["-m", "trainer", *program, "--checkpoint-dir", str(killed)])
    with (work / "killed.log").open("w") as output:
        job = subprocess.Popen(
            command,
            cwd=ROOT,
            env=environment({"TRAINER_CHECKPOINT_WRITE_DELAY": "1"}),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and job.poll() is None:
            try:
                entries = CheckpointStore(killed).manifest()
            except Exception:
                entries = []
            if any(entry.step_in_epoch > 0 for entry in entries):
                break
            time.sleep(0.05)
        # Like a lost node: torchrun and every worker at once (each worker is in a session of
        # its own, so torchrun's process group would not reach them).
        workers = procs.descendants(job.pid)
        procs.signal_pids([job.pid, *workers], signal.SIGKILL)
        job.wait()
        deadline = time.monotonic() + 60
        while any(procs.is_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
    killed_at = describe(killed)
    run(command, work / "resumed.log", environment())
    resumed, expected = describe(killed), describe(reference)
    return {
        "killed_at": [killed_at["epochs_completed"], killed_at["step_in_epoch"]],
        "bitwise_equal": resumed["model_sha256"] == expected["model_sha256"],
        "model_sha256": resumed["model_sha256"],
    }


def steps_worker(args: argparse.Namespace) -> int:
    """One rank of the step-time comparison (run under torchrun)."""
    ctx = init_distributed(300.0)
    torch.manual_seed(0)
    epochs, dataset = args.epochs, args.dataset_size
    timings: dict[str, list[float]] = {"bare": [], "trainer": []}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            for name in ("bare", "trainer"):
                dist.barrier()
                if name == "bare":
                    seconds, steps = bare_ddp_loop(ctx, epochs, dataset)
                else:
                    seconds, steps = trainer_loop(
                        ctx, epochs, dataset, Path(scratch) / str(round_index)
                    )
                timings[name].append(seconds / steps)
    per_step = {name: statistics.median(values) for name, values in timings.items()}
    if ctx.is_main:
        Path(args.out).write_text(
            json.dumps(
                {
                    "bare_us_per_step": round(per_step["bare"] * 1e6, 1),
                    "trainer_us_per_step": round(per_step["trainer"] * 1e6, 1),
                    "ratio": round(per_step["trainer"] / per_step["bare"], 3),
                    "world_size": ctx.world_size,
                }
            )
        )
    shutdown(ctx)
    return 0


def bare_ddp_loop(ctx: DistContext, epochs: int, dataset: int) -> tuple[float, int]:
    """The loop a DDP tutorial writes, on the trainer's own data order and batches."""
    task = regression_task(TaskContext(0, dataset, ctx.device))
    data = GlobalBatches(
        task.inputs.to(ctx.device),
        task.targets.to(ctx.device),
        32 * ctx.world_size,
        32,
        0,
        ctx.rank,
        ctx.world_size,
    )
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    model = DistributedDataParallel(task.model, device_ids=device_ids)
    steps = 0
    synchronize(ctx)
    started = time.perf_counter()
    for epoch in range(epochs):
        for _, pieces in data.batches(epoch):
            _, inputs, targets, _, _ = pieces[0]
            loss = task.loss_fn(model(inputs), targets)
            task.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            task.optimizer.step()
            steps += 1
        assert task.scheduler is not None
        task.scheduler.step()
    synchronize(ctx)
    return time.perf_counter() - started, steps


def trainer_loop(ctx: DistContext, epochs: int, dataset: int, directory: Path) -> tuple[float, int]:
    """The trainer's own loop, with its epoch metrics, stop agreement and final checkpoint."""
    directory.mkdir(parents=True, exist_ok=True)
    config = TrainConfig(
        total_epochs=epochs, save_every=epochs, checkpoint_dir=directory, dataset_size=dataset
    )
    trainer = Trainer.build(config, ctx, 32 * ctx.world_size)
    point = ResumePoint(None, 0, 0, 32 * ctx.world_size)
    carried = trainer.restore(point, None)
    synchronize(ctx)
    started = time.perf_counter()
    trainer.run(point, StopAgreement(ctx), carried)
    synchronize(ctx)
    seconds = time.perf_counter() - started
    if trainer.writer is not None:
        trainer.writer.close()
    return seconds, epochs * trainer.data.steps_per_epoch()


def synchronize(ctx: DistContext) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    dist.barrier()


def steps_comparison(work: Path, nproc: int, sizes: Sizes) -> dict[str, Any]:
    out = work / "steps.json"
    program = [str(Path(__file__).resolve()), "steps", "--out", str(out)]
    program += ["--epochs", str(sizes.steps_epochs), "--dataset-size", str(sizes.steps_dataset)]
    program += ["--rounds", str(sizes.steps_rounds)]
    run(torchrun(nproc, program), work / "steps.log", environment())
    return json.loads(out.read_text())


def fsdp_worker(args: argparse.Namespace) -> int:
    """One rank of the FSDP phase (run under torchrun): the trainer's own model, sharding and
    sharded writer, driven step by step so each step and each save can be timed on every rank.
    Stall: the time ``Trainer.checkpoint`` keeps the loop (gathering the RNG states, staging
    this rank's shards to host memory, handing them to the writer thread)."""
    ctx = init_distributed(600.0)
    global_batch = args.batch * ctx.world_size
    config = TrainConfig(
        total_epochs=1,
        save_every=1,
        batch_size=args.batch,
        checkpoint_dir=args.directory,
        dataset_size=global_batch * (args.steps + 1),
        task=FSDP_TASK,
        parallelism="fsdp",
        keep=2,
    )
    trainer = Trainer.build(config, ctx, global_batch)
    point = ResumePoint(None, 0, 0, global_batch)
    trainer.restore(point, None)
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    writer = trainer.sharded_writer
    assert writer is not None
    model, optimizer, loss_fn = trainer.model, trainer.task.optimizer, trainer.task.loss_fn
    quiet, busy, stalls = [], [], []
    for step, pieces in trainer.data.batches(0):
        if step >= args.steps:
            break
        in_flight = writer.in_flight()
        synchronize(ctx)
        started = time.perf_counter()
        _, inputs, targets, _, _ = pieces[0]
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        synchronize(ctx)
        (busy if in_flight else quiet).append(time.perf_counter() - started)
        if (step + 1) % args.save_every == 0:
            started = time.perf_counter()
            trainer.checkpoint(0, step + 1, EpochLoss(), 0, final=False)
            synchronize(ctx)
            stalls.append(time.perf_counter() - started)
    started = time.perf_counter()
    writer.wait()  # the last background write, committed
    drain = time.perf_counter() - started
    synchronize(ctx)
    started = time.perf_counter()
    # Written in this thread; a step past the last periodic save's, whose name it would take.
    trainer.checkpoint(0, args.steps + 1, EpochLoss(), 0, final=True)
    synchronize(ctx)
    synchronous = time.perf_counter() - started
    writer.close()
    mine = {
        "rank": ctx.rank,
        "step_s": round(statistics.median(quiet), 5) if quiet else None,
        "step_with_write_in_flight_s": round(statistics.median(busy), 5) if busy else None,
        "stall_per_save_s": [round(value, 4) for value in stalls],
        "synchronous_save_s": round(synchronous, 4),
        "last_write_drain_s": round(drain, 4),
        "peak_memory_gb": round(torch.cuda.max_memory_allocated(ctx.device) / 2**30, 3)
        if ctx.device.type == "cuda"
        else None,
    }
    per_rank = all_gather_object(ctx, mine)
    if ctx.is_main:
        described = describe(args.directory)
        Path(args.out).write_text(
            json.dumps(
                {
                    "world_size": ctx.world_size,
                    "per_rank": per_rank,
                    "checkpoint": {
                        key: described[key] for key in ("layout", "files", "size", "world_size")
                    },
                }
            )
        )
    shutdown(ctx)
    return 0


def fsdp_phase(work: Path, info: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    depth, width = sizes.fsdp_model
    env = environment({FSDP_DEPTH_ENV: depth, FSDP_WIDTH_ENV: width})
    # One rank per GPU under NCCL; on several GPUs also 1 rank, to see memory per rank fall.
    counts = sorted({1, info["gpus"]}) if info["cuda"] and info["gpus"] > 1 else [processes(info)]
    results: dict[str, Any] = {"blocks": int(depth), "width": int(width)}
    for nproc in counts:
        out = work / f"fsdp-{nproc}.json"
        program = [str(Path(__file__).resolve()), "fsdp", "--out", str(out)]
        program += ["--directory", str(work / f"fsdp-{nproc}"), "--batch", str(sizes.fsdp_batch)]
        program += ["--steps", str(sizes.fsdp_steps), "--save-every", str(sizes.fsdp_save_every)]
        run(torchrun(nproc, program), work / f"fsdp-{nproc}.log", env)
        results[f"ranks_{nproc}"] = json.loads(out.read_text())
    return results


def check(args: argparse.Namespace) -> int:
    sizes = Sizes(args.smoke, args.state_mb)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    info = device_info()
    nproc = processes(info)
    results: dict[str, Any] = {"device": info, "processes": nproc, "smoke": args.smoke}
    if info["cuda"] and nproc < 2:
        results["note"] = "one GPU: NCCL puts one rank per GPU, so the DDP runs have 1 process"
    started = time.perf_counter()
    phases = (
        ("default", lambda: default_run(work, nproc, sizes)),
        ("large", lambda: large_run(work, nproc, sizes)),
        ("stall", lambda: stall(work, sizes)),
        ("resume", lambda: resume(work, nproc, sizes)),
        ("steps", lambda: steps_comparison(work, nproc, sizes)),
        ("fsdp", lambda: fsdp_phase(work, info, sizes)),
    )
    for name, phase in phases:
        phase_started = time.perf_counter()
        print(f"gpu_check: {name} ...", flush=True)
        results[name] = phase()
        results[name]["phase_s"] = round(time.perf_counter() - phase_started, 1)
        print(f"gpu_check: {name}: {json.dumps(results[name])}", flush=True)
    results["total_s"] = round(time.perf_counter() - started, 1)
    results["large_hidden_width"] = hidden_width(sizes.state_mb)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"gpu_check: figures in {args.out} (logs and checkpoints in {work})", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    all_phases = sub.add_parser("check", help="every phase; the figures to --out")
    all_phases.add_argument("--out", required=True, help="the JSON file of figures")
    all_phases.add_argument("--workdir", help="logs and checkpoints (default: a new temporary one)")
    all_phases.add_argument("--state-mb", type=int, default=2048, help="the large model's state")
    all_phases.add_argument("--smoke", action="store_true", help="seconds, not figures (CI)")
    worker = sub.add_parser("steps", help="one rank of the step-time comparison (torchrun)")
    worker.add_argument("--out", required=True)
    worker.add_argument("--epochs", type=int, required=True)
    worker.add_argument("--dataset-size", type=int, required=True)
    worker.add_argument("--rounds", type=int, required=True)
    sharded = sub.add_parser("fsdp", help="one rank of the FSDP phase (torchrun)")
    sharded.add_argument("--out", required=True)
    sharded.add_argument("--directory", required=True)
    sharded.add_argument("--batch", type=int, required=True)
    sharded.add_argument("--steps", type=int, required=True)
    sharded.add_argument("--save-every", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "steps":
        run_and_exit(lambda: steps_worker(args))
    if args.command == "fsdp":
        run_and_exit(lambda: fsdp_worker(args))
    if args.state_mb < 1:
        parser.error(f"--state-mb = {args.state_mb}: allowed: 1 or more")
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
