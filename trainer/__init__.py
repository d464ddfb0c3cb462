"""Fault-tolerant, resumable DDP trainer (replaces the tutorial's ``multinode.py``).

Run it as ``torchrun [torchrun flags] -m trainer [--batch_size B] TOTAL_EPOCHS SAVE_EVERY ...``.
The package imports only torch, numpy and the standard library so it runs on the stock
``nvcr.io/nvidia/pytorch`` image; matplotlib is imported only by ``trainer.plot``.
"""
