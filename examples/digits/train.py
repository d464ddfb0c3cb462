"""Train a small classifier of handwritten digits with PyTorch DDP: a plain training script, as
your own would be, that the stack runs on every pod under torchrun (`job.command`).

What it reads, all of it standard:
* torchrun's RANK, LOCAL_RANK and WORLD_SIZE (the stack's pods get torchrun's rendezvous from
  the job's controller);
* CHECKPOINT_DIR, this run's directory on the stack's checkpoint claim (the stack sets it in
  every pod; `make local` sets it to a local directory): the script saves `checkpoint.pt` there
  every `--save-every` epochs and at the end, and resumes from it when it is there, so a pod that
  is restarted (a lost node, a preemption) goes on from the last save;
* the data set: `--data-dir` (default $DATA_DIR, else /data, where the stack mounts its data
  claim read-only) holding `digits.npz` (what prepare_data.py writes); without it, the copy of
  the digits that scikit-learn ships inside its package. Nothing is downloaded.

What it tells: a line per epoch, and the same as a progress report (`@progress` and a JSON
object, docs/reference/progress.md), which `pulumi up` and `make status` show as the job's
progress.

    torchrun --standalone --nproc-per-node 2 train.py --epochs 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

CHECKPOINT = "checkpoint.pt"
DATA_FILE = "digits.npz"
TEST_SAMPLES = 297  # of the 1797 digits; the rest train
SEED = 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=30, help="epochs to train (default 30)")
    parser.add_argument(
        "--batch-size", type=int, default=32, help="samples per step on each process"
    )
    parser.add_argument("--lr", type=float, default=0.05, help="SGD's learning rate")
    parser.add_argument(
        "--save-every", type=int, default=1, help="a checkpoint every this many epochs"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("DATA_DIR", "/data")),
        help=f"where {DATA_FILE} is (default $DATA_DIR, else /data)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=Path(os.environ.get("CHECKPOINT_DIR", "checkpoints")),
        help="where checkpoint.pt goes (default $CHECKPOINT_DIR, which the stack sets)",
    )
    args = parser.parse_args(argv)
    for flag in ("epochs", "batch_size", "save_every"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


def load_digits(data_dir: Path) -> tuple[np.ndarray, np.ndarray, str]:
    """The 8x8 images (as 64 features in [0, 1]) and their labels, and where they came from."""
    path = data_dir / DATA_FILE
    if path.is_file():
        with np.load(path) as data:
            images, labels = data["images"], data["labels"]
        source = str(path)
    else:
        from sklearn.datasets import load_digits as bundled

        digits = bundled()
        images, labels = digits.data, digits.target
        source = f"scikit-learn's bundled copy (no {path})"
    return images.astype(np.float32) / 16.0, labels.astype(np.int64), source


def split(images: np.ndarray, labels: np.ndarray) -> tuple[TensorDataset, TensorDataset]:
    """The same train and test sets on every rank and every restart."""
    order = np.random.default_rng(SEED).permutation(len(labels))
    test, train = order[:TEST_SAMPLES], order[TEST_SAMPLES:]

    def tensors(index: np.ndarray) -> TensorDataset:
        return TensorDataset(torch.from_numpy(images[index]), torch.from_numpy(labels[index]))

    return tensors(train), tensors(test)


def model() -> nn.Module:
    torch.manual_seed(SEED)  # the same initial weights on every rank
    return nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10)
    )


def save(path: Path, state: dict[str, object]) -> None:
    """Write the checkpoint whole or not at all: a pod killed mid-write leaves the previous one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with partial.open("wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    partial.replace(path)


def accuracy(net: nn.Module, data: TensorDataset, device: torch.device) -> float:
    images, labels = data.tensors
    with torch.no_grad():
        predicted = net(images.to(device)).argmax(dim=1).cpu()
    return float((predicted == labels).float().mean())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)

    def say(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    images, labels, source = load_digits(args.data_dir)
    train, test = split(images, labels)
    say(f"data: {len(labels)} digits from {source}; {len(train)} train on {world} process(es)")
    if os.environ.get("HF_TOKEN"):
        say("HF_TOKEN is set (a secret of the stack: this script never prints it)")

    net = model().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    checkpoint = args.checkpoint_dir / CHECKPOINT
    start = 0
    if checkpoint.is_file():
        state = torch.load(checkpoint, map_location="cpu")
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["epoch"])
        say(f"resuming from {checkpoint} (epoch {start} of {args.epochs})")
    else:
        say(f"no checkpoint in {args.checkpoint_dir}: starting from scratch")
    ddp = DistributedDataParallel(net, device_ids=[device.index] if cuda else None)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=SEED)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    saved: dict[str, float] | None = None  # the newest checkpoint this process wrote
    for epoch in range(start, args.epochs):
        began = time.monotonic()
        sampler.set_epoch(epoch)  # another shuffle each epoch, the same one after a restart
        ddp.train()
        total, batches = 0.0, 0
        for batch, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(ddp(batch.to(device)), targets.to(device))
            loss.backward()
            optimizer.step()
            total, batches = total + float(loss), batches + 1
        done = epoch + 1
        report: dict[str, object] = {
            "epoch": done,
            "epochs": args.epochs,
            "done": done == args.epochs,
        }
        if rank == 0 and (done % args.save_every == 0 or done == args.epochs):
            state = {"epoch": done, "model": net.state_dict(), "optimizer": optimizer.state_dict()}
            save(checkpoint, state)
            saved = {"epoch": done, "time": time.time()}
        dist.barrier()  # nobody goes on while rank 0 may still be saving
        net.eval()
        seconds, mean_loss = time.monotonic() - began, total / max(batches, 1)
        say(
            f"epoch {done}/{args.epochs}: loss {mean_loss:.4f}, test accuracy "
            f"{accuracy(net, test, device):.4f} ({seconds:.2f}s)"
        )
        samples_per_s = len(train) / seconds if seconds > 0 else None
        report.update(loss=mean_loss, samples_per_s=samples_per_s, time=time.time())
        if saved is not None:
            report["checkpoint"] = saved
        say("@progress " + json.dumps(report))
    say(f"done: {args.epochs} epochs, checkpoint {checkpoint}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
