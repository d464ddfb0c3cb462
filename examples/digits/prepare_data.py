"""Write the digits data set as train.py reads it from a data claim: `DIR/digits.npz`, with the
8x8 images (as 64 values each) and their labels, from the copy scikit-learn ships.

    python prepare_data.py DIR

On a cluster, DIR is where your data claim is mounted in a pod that may write it (or the
volume's directory on its server); with `make local`, the claim's local stand-in
(`.claims/<claim>` unless `--volume CLAIM=DIR` says otherwise).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

DATA_FILE = "digits.npz"


def write(directory: Path) -> Path:
    digits = load_digits()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / DATA_FILE
    np.savez(path, images=digits.data, labels=digits.target)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python prepare_data.py DIR")
    print(write(Path(sys.argv[1])))
