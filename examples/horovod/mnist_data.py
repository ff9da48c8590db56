"""MNIST-shaped data made on the spot, for Horovod's examples ported to blinkflow (nothing may be
downloaded at run time): ``load_data`` returns what ``tf.keras.datasets.mnist.load_data`` does,
((x_train, y_train), (x_test, y_test)) with 28x28 uint8 images and int labels, made from
the handwritten digits of examples/data/digits.csv.gz (8x8, 1,797 images) scaled up 3x and padded
to 28x28.
"""
import os
import sys

import numpy as np


def load_data(path=None):
    """``tf.keras.datasets.mnist.load_data``'s shapes and types; ``path`` is ignored."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # examples/
    from digits import load_digits

    images, labels = load_digits()
    images = np.kron(images, np.ones((3, 3)))  # 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2)))  # 28x28, as MNIST
    images = np.round(images * (255.0 / 16.0)).astype(np.uint8)
    labels = labels.astype(np.uint8)
    split = len(images) * 5 // 6
    return (images[:split], labels[:split]), (images[split:], labels[split:])
