"""Entry point for ``python -m trainer`` / ``torchrun -m trainer``."""

from __future__ import annotations

from trainer.distributed import run_and_exit
from trainer.loop import main

if __name__ == "__main__":
    run_and_exit(main)
