"""The tutorial's training loop (multinode.py's shape), the baseline `make bench` times end to end.

    torchrun --standalone --nproc-per-node 2 bench/tutorial_loop.py [--batch_size B] TOTAL SAVE

Per-sample tensors in a Dataset, DataLoader + DistributedSampler, DDP, and a synchronous
``torch.save`` of the snapshot every SAVE epochs on rank 0 - with the trainer's default task
(same model, data, optimizer and scheduler), so the two programs do the same work.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.checkpoint_schema import EPOCHS_RUN, MODEL_STATE
from trainer.task import TaskContext, regression_task


class PerSampleDataset(Dataset):
    """The tutorial's MyTrainDataset shape: a list of (input, target) tensors per sample."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.data = [(inputs[i].clone(), targets[i].clone()) for i in range(inputs.shape[0])]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--dataset-size", type=int, default=2048)
    parser.add_argument("--snapshot", type=Path, default=Path(tempfile.gettempdir()) / "tut.pt")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    task = regression_task(TaskContext(0, args.dataset_size, torch.device("cpu")))
    dataset = PerSampleDataset(task.inputs, task.targets)
    sampler = DistributedSampler(dataset, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, sampler=sampler)
    model = DistributedDataParallel(task.model)
    for epoch in range(args.total_epochs):
        sampler.set_epoch(epoch)
        for source, targets in loader:
            task.optimizer.zero_grad()
            loss = task.loss_fn(model(source), targets)
            loss.backward()
            task.optimizer.step()
        if task.scheduler is not None:
            task.scheduler.step()
        if rank == 0 and (epoch + 1) % args.save_every == 0:
            # The tutorial's two keys, the same ones the trainer's snapshot.pt carries.
            torch.save(
                {MODEL_STATE: model.module.state_dict(), EPOCHS_RUN: epoch + 1}, args.snapshot
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
