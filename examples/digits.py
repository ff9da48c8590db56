"""The handwritten digits the examples train on (``data/digits.csv.gz``, see ``data/README.md``):
nothing to download, no scikit-learn."""
import os

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "digits.csv.gz")


def load_digits():
    """``(images, labels)``: 1,797 images of 8x8 float pixels in 0..16 and their int64 labels."""
    table = np.loadtxt(DATA, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype("int64")


def split(x, y, test_fraction, seed=0):
    """``x_train, x_test, y_train, y_test``: a shuffled split that keeps each label's share in
    both parts (every rank gets the same one from the same seed)."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for label in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == label))
        test[rows[:int(round(len(rows) * test_fraction))]] = True
    train_rows, test_rows = rng.permutation(np.flatnonzero(~test)), rng.permutation(np.flatnonzero(test))
    return x[train_rows], x[test_rows], y[train_rows], y[test_rows]
