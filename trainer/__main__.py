"""Entry point for ``python -m trainer`` / ``torchrun -m trainer``."""

from __future__ import annotations

import sys

from trainer.loop import main

if __name__ == "__main__":
    sys.exit(main())
