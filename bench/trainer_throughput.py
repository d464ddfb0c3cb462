"""Benchmark: our trainer vs the tutorial's training loop, checkpoint stall, and resume.

0. End to end as a user runs it: the whole ``torchrun --standalone --nproc-per-node 2 -m trainer
   --batch_size 32 100 25`` process vs ``bench/tutorial_loop.py`` run the same way (same
   schedule), alternated, median of 3.
1. Throughput (2 gloo ranks on CPU, spawned here): steady-state samples/s and end-to-end time of
   ``trainer``'s loop and of a baseline written the tutorial's way (per-sample tensors in a
   Dataset, DataLoader + DistributedSampler), with the same model, batch, optimizer, scheduler
   and data order, so both must end with bitwise-equal weights (printed as a check).
2. Checkpoint stall: loop time lost per checkpoint (save() blocking plus steps slowed by the
   writer sharing the cores), first save included, for a 32 KB and a 512 MB state: ours vs a
   synchronous save, over 5 fresh writers of 6 saves each, each write done before the next
   save (epoch saves); then the same for saves a fixed stretch of training apart, as
   ``--save-every-steps`` makes them (a save may come while the previous one is still being
   written); then the measurement of a stall of known length, which shows the estimator's own
   bias.
3. Resume: time from a committed 1 GB checkpoint to a model ready for its first step, ours
   (verify + load + restore) vs reading the file and ``torch.load`` once.

Run: ``make bench`` (or ``OMP_NUM_THREADS=1 .venv/bin/python bench/trainer_throughput.py``).
Prints numbers only; nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tutorial_loop import PerSampleDataset
from machine.ports import free_port
from trainer.async_writer import CheckpointWriter
from trainer.checkpoint import CheckpointStore, model_sha256
from trainer.checkpoint_schema import MODEL_STATE, OPTIMIZER_STATE, TrainingCheckpoint
from trainer.cli import TrainConfig
from trainer.data import GlobalBatches
from trainer.distributed import DistContext, run_and_exit
from trainer.loop import Trainer
from trainer.metrics import read_metrics
from trainer.progress import DEFAULT_REPORT_EVERY_S
from trainer.resume import ResumePoint
from trainer.stop_agreement import StopAgreement
from trainer.task import TaskContext, regression_task

WORLD_SIZE = 2


def baseline(args: argparse.Namespace, rank: int) -> dict[str, float | str]:
    started = time.perf_counter()
    cpu_started = time.process_time()
    task = regression_task(TaskContext(args.seed, args.dataset_size, torch.device("cpu")))
    dataset = PerSampleDataset(task.inputs, task.targets)
    sampler = DistributedSampler(dataset, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, sampler=sampler)
    model = DistributedDataParallel(task.model)
    epoch_seconds = []
    for epoch in range(args.epochs):
        epoch_start = time.perf_counter()
        sampler.set_epoch(epoch)
        for source, targets in loader:
            task.optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(source), targets)
            loss.backward()
            task.optimizer.step()
        assert task.scheduler is not None
        task.scheduler.step()
        epoch_seconds.append(time.perf_counter() - epoch_start)
    steady = epoch_seconds[1:] or epoch_seconds
    return {
        "samples_per_s": args.dataset_size * len(steady) / sum(steady),
        "end_to_end_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu_started,
        "model_sha256": model_sha256(task.model.state_dict()),
    }


def ours(
    args: argparse.Namespace, rank: int, directory: Path, *, reporting: bool = True
) -> dict[str, float | str]:
    """The trainer's loop; ``reporting``: with rank 0's progress reports (trainer.progress:
    the @progress line, TensorBoard's event files and Prometheus' /metrics on a free port, at
    the default interval), else the same run with the reporter removed."""
    if reporting and rank == 0:
        os.environ["METRICS_PORT"] = str(free_port())
    started = time.perf_counter()
    cpu_started = time.process_time()
    directory.mkdir(exist_ok=True)
    config = TrainConfig(
        total_epochs=args.epochs,
        save_every=args.epochs,  # the final checkpoint only, as a real run would write
        batch_size=args.batch_size,
        checkpoint_dir=directory,
        seed=args.seed,
        dataset_size=args.dataset_size,
    )
    ctx = DistContext(rank, WORLD_SIZE, rank, torch.device("cpu"), "gloo")
    global_batch = args.batch_size * WORLD_SIZE
    trainer = Trainer.build(config, ctx, global_batch)
    point = ResumePoint(None, 0, 0, global_batch)
    carried = trainer.restore(point, None)
    if not reporting and trainer.reporter is not None:
        trainer.reporter.close()
        trainer.reporter = None
    trainer.run(point, StopAgreement(ctx), carried)
    if trainer.writer is not None:
        trainer.writer.close()
    if trainer.reporter is not None:
        trainer.reporter.close()
        os.environ.pop("METRICS_PORT", None)
    end_to_end = time.perf_counter() - started
    result: dict[str, float | str] = {
        "end_to_end_s": end_to_end,
        "cpu_s": time.process_time() - cpu_started,
        "model_sha256": model_sha256(trainer.task.model.state_dict()),
    }
    if rank == 0:
        rows = read_metrics(directory)[1:]
        result["samples_per_s"] = sum(r["samples"] for r in rows) / sum(r["seconds"] for r in rows)
    return result


def worker(rank: int, args: argparse.Namespace, port: int, out: str) -> None:
    """One rank of the throughput runs, ended as ``python -m trainer`` ends (see
    ``trainer.distributed.run_and_exit``: its gloo threads would abort the interpreter's
    finalization)."""
    run_and_exit(lambda: throughput_rank(rank, args, port, out))


def throughput_rank(rank: int, args: argparse.Namespace, port: int, out: str) -> int:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=300),
    )
    runs: dict[str, list[dict[str, float | str]]] = {"baseline": [], "ours": [], "quiet": []}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        # Alternate the two so a burst of load from elsewhere hits both; report medians.
        for round_index in range(args.rounds):
            for name in ("baseline", "ours", "quiet"):
                dist.barrier()
                if name == "baseline":
                    result = baseline(args, rank)
                else:
                    run_directory = directory / f"{name}-{round_index}"
                    result = ours(args, rank, run_directory, reporting=name == "ours")
                runs[name].append(result)
        dist.barrier()
    cpu = {name: [float(run["cpu_s"]) for run in values] for name, values in runs.items()}
    every_rank: list[dict[str, list[float]] | None] = [None] * WORLD_SIZE
    dist.all_gather_object(every_rank, cpu)
    if rank == 0:
        steps = args.epochs * -(-args.dataset_size // WORLD_SIZE // args.batch_size)
        results: dict[str, dict[str, float | str]] = {}
        per_round: dict[str, list[float]] = {}
        for name, values in runs.items():
            rates = [float(run["samples_per_s"]) for run in values]
            # CPU seconds of both ranks per step: what a step costs, whatever else the
            # machine runs (wall time on a shared 2-core machine mostly measures the others).
            cpu_per_step = [
                sum(rank_cpu[name][index] for rank_cpu in every_rank if rank_cpu) / steps
                for index in range(len(values))
            ]
            per_round[name] = cpu_per_step
            results[name] = {
                "samples_per_s": statistics.median(rates),
                "end_to_end_s": statistics.median(float(run["end_to_end_s"]) for run in values),
                "cpu_us_per_step": statistics.median(cpu_per_step) * 1e6,
                "model_sha256": str(values[-1]["model_sha256"]),
            }
        ratios = [
            float(mine["samples_per_s"]) / float(base["samples_per_s"])
            for mine, base in zip(runs["ours"], runs["baseline"], strict=True)
        ]
        results["paired"] = {"median_ratio": statistics.median(ratios), "min": min(ratios)}
        results["paired"]["max"] = max(ratios)
        # What the reports cost: CPU per step of the same run with them and without, paired by
        # round (every second of the run counts: samples/s leaves the epoch-end report out).
        paired = zip(per_round["ours"], per_round["quiet"], strict=True)
        costs = [mine / quiet - 1 for mine, quiet in paired]
        results["reporting"] = {
            "median_cost": statistics.median(costs),
            "min": min(costs),
            "max": max(costs),
        }
        Path(out).write_text(json.dumps(results))
    dist.destroy_process_group()
    return 0


def throughput(args: argparse.Namespace) -> dict[str, dict[str, float | str]]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        mp.spawn(worker, args=(args, free_port(), out.name), nprocs=WORLD_SIZE, join=True)
        return json.loads(Path(out.name).read_text())


def data_path(args: argparse.Namespace) -> dict[str, float]:
    """Microseconds to produce one batch, without the model or the all-reduce: the part of a
    step our trainer changes. On a machine where gloo's per-step all-reduce dominates (small
    model, few cores) the end-to-end ratio above stays near 1 even though this part shrinks."""
    task = regression_task(TaskContext(args.seed, args.dataset_size, torch.device("cpu")))
    dataset = PerSampleDataset(task.inputs, task.targets)
    sampler = DistributedSampler(dataset, num_replicas=WORLD_SIZE, rank=0, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, sampler=sampler)
    sharded = GlobalBatches(
        task.inputs,
        task.targets,
        global_batch=args.batch_size * WORLD_SIZE,
        micro_batch=args.batch_size,
        seed=args.seed,
        rank=0,
        world_size=WORLD_SIZE,
    )
    timings: dict[str, list[float]] = {"baseline": [], "ours": []}
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        started = time.perf_counter()
        batches = sum(1 for _ in loader)
        timings["baseline"].append((time.perf_counter() - started) / batches)
        started = time.perf_counter()
        batches = sum(1 for _ in sharded.batches(epoch))
        timings["ours"].append((time.perf_counter() - started) / batches)
    return {name: statistics.median(values) * 1e6 for name, values in timings.items()}


def training_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    inputs = torch.rand(32, 20)
    loss = nn.functional.mse_loss(model(inputs), inputs[:, :1])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


CONTROL_STEPS = 2000
# How often the measuring loop asks whether the write is done: each ask is a syscall
# (about 4 us here), which the trainer does not pay, as it never asks.
POLL_EVERY_STEPS = 32
ESTIMATOR_CHECK_S = 0.05


def timed_steps(model: nn.Module, optimizer: torch.optim.Optimizer, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        training_step(model, optimizer)
    return time.perf_counter() - started


@dataclass(frozen=True)
class Bracketed:
    """One save measured inside the training loop."""

    lost_s: float  # wall time beyond what the steps taken would have cost with no save
    blocking_s: float  # of which save() itself
    noise_s: float  # how far the two control windows disagree, scaled to the steps taken


def bracketed_save(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    save: Callable[[], None],
    in_flight: Callable[[], bool],
) -> Bracketed:
    """Loop time lost to one save, counting the steps slowed while a write is in flight.

    A step's cost drifts by tens of percent within seconds on a shared VM, so the save is
    bracketed by control windows of the same loop with nothing in flight, and the steps taken
    during the write are charged at their mean rate. The estimate is not clamped at the time
    ``save`` blocks: the noise is symmetric, so clamping would bias every mean upwards."""
    before = timed_steps(model, optimizer, CONTROL_STEPS)
    started = time.perf_counter()
    save()
    blocking = time.perf_counter() - started
    steps = 0
    while in_flight():  # a poll is a syscall; the trainer itself never polls
        for _ in range(POLL_EVERY_STEPS):
            training_step(model, optimizer)
        steps += POLL_EVERY_STEPS
    elapsed = time.perf_counter() - started
    after = timed_steps(model, optimizer, CONTROL_STEPS)
    per_step = (before + after) / (2 * CONTROL_STEPS)
    return Bracketed(
        lost_s=elapsed - steps * per_step,
        blocking_s=blocking,
        noise_s=abs(before - after) / CONTROL_STEPS * steps,
    )


def stall_state(nbytes: int) -> dict[str, Any]:
    """Half weights, half an optimizer slot (SGD momentum) that, as in a real optimizer, only
    exists after the first step; :func:`stall_round` adds it then."""
    half = max(nbytes // 8, 1)  # float32 elements in half the state
    return TrainingCheckpoint(
        model_state={"weights": torch.randn(half)},
        epochs_run=1,
        world_size=1,
        config_fingerprint="bench",
        optimizer_state={"state": {}, "param_groups": [{"params": [0]}]},
    ).to_state()


def stall_round(nbytes: int, repeats: int, directory: Path) -> dict[str, Any]:
    """``repeats`` saves by a fresh writer, as a run makes them (first save included), each
    paired with a synchronous save of the same state."""
    model = nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    state = stall_state(nbytes)
    sync = CheckpointWriter(CheckpointStore(directory / "sync", keep=2), background=False)
    ours = CheckpointWriter(CheckpointStore(directory / "ours", keep=2))
    sync.store.storage.create()
    ours.store.storage.create()
    # The trainer calls prepare() before training and again after its first step, when the
    # optimizer has created its lazy slots, so the first save finds its staging buffer whole.
    started = time.perf_counter()
    ours.prepare(state)
    prepare_s = time.perf_counter() - started
    training_step(model, optimizer)
    state[OPTIMIZER_STATE]["state"] = {0: {"momentum_buffer": torch.randn(max(nbytes // 8, 1))}}
    started = time.perf_counter()
    ours.prepare(state)
    prepare_s += time.perf_counter() - started
    # The trainer trains for a while before its first save; give the writer that time.
    deadline = time.perf_counter() + 5.0
    while ours.writer_started and not ours.writer_ready() and time.perf_counter() < deadline:
        training_step(model, optimizer)
    sync_s, saves, modes = [], [], set()
    for repeat in range(repeats):
        started = time.perf_counter()
        sync.save(state, epochs_completed=repeat + 1, step_in_epoch=0)
        sync_s.append(time.perf_counter() - started)

        def save(epochs: int = repeat + 1) -> None:
            ours.save(state, epochs_completed=epochs, step_in_epoch=0)

        saves.append(bracketed_save(model, optimizer, save, ours.in_flight))
        ours.wait()
        modes.add(ours.last_mode or "?")
    ours.close()
    return {"sync_s": sync_s, "saves": saves, "prepare_s": prepare_s, "modes": modes}


def checkpoint_stall(nbytes: int, repeats: int, rounds: int) -> dict[str, Any]:
    """Seconds the training loop loses per checkpoint, over ``rounds`` fresh writers of
    ``repeats`` saves each; the first save of each round is reported on its own too."""
    results = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as scratch:
            results.append(stall_round(nbytes, repeats, Path(scratch)))
    saves = [save for result in results for save in result["saves"]]
    lost = [save.lost_s for save in saves]
    return {
        "bytes": nbytes,
        "sync_s": statistics.mean(value for result in results for value in result["sync_s"]),
        "prepare_s": statistics.mean(result["prepare_s"] for result in results),
        "first_lost_s": statistics.median(result["saves"][0].lost_s for result in results),
        "lost_s": statistics.mean(lost),
        "median_lost_s": statistics.median(lost),
        "max_lost_s": max(lost),
        "blocking_s": statistics.mean(save.blocking_s for save in saves),
        "noise_s": statistics.median(save.noise_s for save in saves),
        "modes": ",".join(sorted(set().union(*(result["modes"] for result in results)))),
    }


def spaced_saves(
    nbytes: int, spacing_s: float, saves: int, directory: Path, *, background: bool = True
) -> tuple[float, float]:
    """Loop seconds lost per save when saves come ``spacing_s`` of training apart (a
    ``--save-every-steps`` schedule), first save included: the loop's time with the saves,
    less the same steps without (control windows before and after, averaged); and the mean
    time ``save()`` itself blocks (with saves this close, mostly waiting for the previous
    write), which the noise of a shared machine does not touch."""
    model = nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    state = stall_state(nbytes)
    writer = CheckpointWriter(CheckpointStore(directory, keep=2), background=background)
    writer.prepare(state)
    training_step(model, optimizer)
    state[OPTIMIZER_STATE]["state"] = {0: {"momentum_buffer": torch.randn(max(nbytes // 8, 1))}}
    writer.prepare(state)
    deadline = time.perf_counter() + 5.0
    while writer.writer_started and not writer.writer_ready() and time.perf_counter() < deadline:
        training_step(model, optimizer)
    per_step = timed_steps(model, optimizer, CONTROL_STEPS) / CONTROL_STEPS
    steps = max(int(spacing_s / per_step), 1)
    before = timed_steps(model, optimizer, steps * saves)
    blocked = 0.0
    started = time.perf_counter()
    for index in range(saves):
        timed_steps(model, optimizer, steps)
        save_started = time.perf_counter()
        writer.save(state, epochs_completed=0, step_in_epoch=index + 1)
        blocked += time.perf_counter() - save_started
    elapsed = time.perf_counter() - started
    writer.close()
    after = timed_steps(model, optimizer, steps * saves)
    return (elapsed - (before + after) / 2) / saves, blocked / saves


def step_saves(nbytes: int, spacings: list[float], saves: int) -> dict[float, dict[str, float]]:
    """:func:`spaced_saves` for each spacing, ours and a synchronous writer."""
    results: dict[float, dict[str, float]] = {}
    for spacing in spacings:
        lost = {}
        for name, background in (("ours", True), ("sync", False)):
            with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as scratch:
                lost[name], lost[f"{name}_blocks"] = spaced_saves(
                    nbytes, spacing, saves, Path(scratch), background=background
                )
        results[spacing] = lost
    return results


def estimator_check(stall_s: float, in_flight_s: float, repeats: int) -> float:
    """What :func:`bracketed_save` reports, mean of ``repeats``, for a save whose cost is known
    exactly: the loop spins ``stall_s`` and then trains on for ``in_flight_s`` with nothing
    running beside it. The difference from ``stall_s`` is the measurement's own bias."""
    model = nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    until = 0.0

    def save() -> None:
        nonlocal until
        started = time.perf_counter()
        while time.perf_counter() - started < stall_s:
            pass
        until = time.perf_counter() + in_flight_s

    def in_flight() -> bool:
        return time.perf_counter() < until

    return statistics.mean(
        bracketed_save(model, optimizer, save, in_flight).lost_s for _ in range(repeats)
    )


def end_to_end(rounds: int) -> dict[str, float]:
    """Wall seconds of the whole torchrun process, as a user runs it, median of ``rounds``."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    times: dict[str, list[float]] = {"baseline": [], "ours": []}
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(rounds):
            for name in ("baseline", "ours"):
                if name == "ours":
                    program = ["-m", "trainer", "--checkpoint-dir", f"{scratch}/ours{index}"]
                else:
                    program = [str(root / "bench" / "tutorial_loop.py")]
                    program += ["--snapshot", f"{scratch}/tutorial{index}.pt"]
                command = [torchrun, "--standalone", "--nproc-per-node", "2", *program]
                started = time.perf_counter()
                subprocess.run(
                    [*command, "--batch_size", "32", "100", "25"],
                    cwd=root,
                    env=env,
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def resume(nbytes: int) -> dict[str, float]:
    """Seconds from a committed checkpoint to a model holding its weights."""
    model = nn.Linear(nbytes // 4 // 1024, 1024, bias=False)
    state = TrainingCheckpoint(
        model_state=model.state_dict(), epochs_run=1, world_size=1, config_fingerprint="bench"
    ).to_state()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as scratch:
        directory = Path(scratch)
        CheckpointStore(directory, keep=2).commit(state, epochs=1, step=0)
        path = directory / "snapshot.pt"
        timings: dict[str, list[float]] = {"baseline": [], "ours": []}
        for _ in range(2):  # alternated; the page cache is warm for both after the first
            started = time.perf_counter()
            loaded = torch.load(io.BytesIO(path.read_bytes()), weights_only=True)
            model.load_state_dict(loaded[MODEL_STATE])
            timings["baseline"].append(time.perf_counter() - started)
            del loaded
            started = time.perf_counter()
            found = CheckpointStore(directory).find_resumable()
            assert found is not None
            model.load_state_dict(found.checkpoint.model_state)
            timings["ours"].append(time.perf_counter() - started)
            del found
    return {name: min(values) for name, values in timings.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--dataset-size", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5, help="alternating runs of each")
    parser.add_argument("--checkpoint-mb", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=6, help="saves per writer")
    parser.add_argument(
        "--stall-rounds", type=int, default=5, help="fresh writers per checkpoint size"
    )
    parser.add_argument(
        "--step-save-seconds",
        type=float,
        nargs="*",
        default=[2.0, 0.5],
        help="seconds of training between --save-every-steps saves, one row each (none skips)",
    )
    parser.add_argument("--resume-mb", type=int, default=1024, help="0 skips the resume row")
    parser.add_argument("--e2e-rounds", type=int, default=3, help="0 skips the end-to-end row")
    args = parser.parse_args()
    # Steady state leaves out the first epoch (warm-up), so one epoch leaves nothing; the
    # medians and means need one round and one save at least; the rows that 0 skips, not < 0.
    minimums = {
        "epochs": 2,
        "rounds": 1,
        "repeats": 1,
        "stall_rounds": 1,
        "resume_mb": 0,
        "e2e_rounds": 0,
    }
    for name, minimum in minimums.items():
        if getattr(args, name) < minimum:
            flag = "--" + name.replace("_", "-")
            parser.error(f"{flag} = {getattr(args, name)}: allowed: {minimum} or more")
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    print(
        f"throughput: {WORLD_SIZE} gloo ranks on CPU, Linear(20, 1) + SGD(momentum 0.9) + StepLR, "
        f"{args.dataset_size} samples, batch {args.batch_size}/rank, {args.epochs} epochs, "
        f"median of {args.rounds} alternating rounds"
    )
    results = throughput(args)
    base, mine = results["baseline"], results["ours"]
    print(f"{'':34}{'baseline (tutorial)':>22}{'trainer':>14}{'ratio':>9}")
    print(
        f"{'steady-state samples/s':34}{base['samples_per_s']:>22,.0f}"
        f"{mine['samples_per_s']:>14,.0f}{mine['samples_per_s'] / base['samples_per_s']:>8.2f}x"
    )
    paired = results["paired"]
    print(
        f"{'  paired ratio, median (min-max)':34}{'':22}{'':14}{paired['median_ratio']:>8.2f}x"
        f"  ({paired['min']:.2f}-{paired['max']:.2f})"
    )
    print(
        f"{'CPU us per step (both ranks)':34}{base['cpu_us_per_step']:>22,.0f}"
        f"{mine['cpu_us_per_step']:>14,.0f}"
        f"{base['cpu_us_per_step'] / mine['cpu_us_per_step']:>8.2f}x"
    )
    print(
        f"{'in-process loop seconds':34}{base['end_to_end_s']:>22.2f}"
        f"{mine['end_to_end_s']:>14.2f}{base['end_to_end_s'] / mine['end_to_end_s']:>8.2f}x"
    )
    same = "yes" if base["model_sha256"] == mine["model_sha256"] else "NO"
    print(f"{'bitwise-equal final weights':34}{same:>22}")
    quiet, cost = results["quiet"], results["reporting"]
    print(
        f"\nprogress reports (@progress line, TensorBoard, Prometheus /metrics; every "
        f"{DEFAULT_REPORT_EVERY_S:g} s and each epoch's end) vs the same run without them:"
    )
    print(
        f"{'  steady-state samples/s, with / without':50}{mine['samples_per_s']:>9,.0f}"
        f" / {quiet['samples_per_s']:,.0f}"
    )
    print(
        f"{'  CPU us per step (both ranks), with / without':50}{mine['cpu_us_per_step']:>9,.0f}"
        f" / {quiet['cpu_us_per_step']:,.0f}"
    )
    print(
        f"{'  CPU cost per step, paired median (min to max)':50}{cost['median_cost']:>9.2%}"
        f"  ({cost['min']:.2%} to {cost['max']:.2%})"
    )
    same = "yes" if quiet["model_sha256"] == mine["model_sha256"] else "NO"
    print(f"{'  bitwise-equal final weights, with / without':50}{same:>9}")
    fetch = data_path(args)
    print(
        f"{'one batch from the data path, us':34}{fetch['baseline']:>22.0f}"
        f"{fetch['ours']:>14.0f}{fetch['baseline'] / fetch['ours']:>8.2f}x"
    )

    for nbytes in (32 << 10, args.checkpoint_mb << 20):
        stall = checkpoint_stall(nbytes, args.repeats, args.stall_rounds)
        size = f"{nbytes >> 10} KB" if nbytes < 1 << 20 else f"{nbytes >> 20} MB"
        print(
            f"\ncheckpoint stall, {size} state, {args.stall_rounds} fresh writers x "
            f"{args.repeats} saves ({stall['modes']}):"
        )
        print(f"{'  synchronous save, loop waits (mean)':50}{stall['sync_s']:>9.4f} s")
        print(f"{'  ours, staging setup (once, before 1st save)':50}{stall['prepare_s']:>9.4f} s")
        print(f"{'  ours, loop time lost, first save (median)':50}{stall['first_lost_s']:>9.4f} s")
        print(
            f"{'  ours, loop time lost (mean / median / max)':50}{stall['lost_s']:>9.4f} s"
            f" / {stall['median_lost_s']:.4f} s / {stall['max_lost_s']:.4f} s"
        )
        print(f"{'  control windows disagree by (median, per save)':50}{stall['noise_s']:>9.4f} s")
        print(f"{'  ours, save() blocks (mean)':50}{stall['blocking_s']:>9.4f} s")
        for label, key in (("mean", "lost_s"), ("first save", "first_lost_s")):
            ratio = stall[key] / stall["sync_s"]
            print(f"{'  loop time lost / synchronous save, ' + label:50}{ratio:>9.1%}")
        print(
            f"{'  worst single save / synchronous save':50}"
            f"{stall['max_lost_s'] / stall['sync_s']:>9.1%}"
        )
    if any(spacing <= 0 for spacing in args.step_save_seconds):
        parser.error(f"--step-save-seconds = {args.step_save_seconds}: allowed: seconds > 0")
    if args.step_save_seconds:
        nbytes = args.checkpoint_mb << 20
        rows = step_saves(nbytes, args.step_save_seconds, args.repeats)
        print(
            f"\ncheckpoint stall of --save-every-steps saves, {nbytes >> 20} MB state, "
            f"{args.repeats} saves a fixed stretch of training apart (beside the epoch saves "
            "above, each written before the next):"
        )
        for spacing, lost in rows.items():
            print(
                f"{f'  {spacing:g} s apart, loop time lost: ours / synchronous':50}"
                f"{lost['ours']:>9.4f} s / {lost['sync']:.4f} s"
            )
            print(
                f"{f'  {spacing:g} s apart, save() blocks: ours / synchronous':50}"
                f"{lost['ours_blocks']:>9.4f} s / {lost['sync_blocks']:.4f} s"
                f"  ({lost['ours_blocks'] / lost['sync_blocks']:.1%})"
            )
    checks = 2 * args.repeats
    measured = estimator_check(ESTIMATOR_CHECK_S, 0.8, checks)
    print(
        f"\nestimator check: a save known to cost {ESTIMATOR_CHECK_S * 1e3:.0f} ms measures"
        f" {measured * 1e3:.0f} ms (mean of {checks})"
    )

    if args.resume_mb:
        timing = resume(args.resume_mb << 20)
        print(f"\nresume to first step, {args.resume_mb} MB checkpoint (best of 2):")
        print(f"{'  read + torch.load once':50}{timing['baseline']:>9.3f} s")
        print(
            f"{'  ours (verify + load + restore)':50}{timing['ours']:>9.3f} s"
            f"  {timing['ours'] / timing['baseline']:.2f}x"
        )

    if args.e2e_rounds:
        times = end_to_end(args.e2e_rounds)
        print(
            f"\nend to end as a user runs it (torchrun --standalone --nproc-per-node 2, "
            f"--batch_size 32 100 25, median of {args.e2e_rounds}, alternated):"
        )
        print(f"{'  tutorial-style loop':50}{times['baseline']:>9.2f} s")
        print(
            f"{'  python -m trainer':50}{times['ours']:>9.2f} s"
            f"  {times['baseline'] / times['ours']:.2f}x (speed vs the tutorial loop)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
