"""``import blinkflow.keras as hvd``: the port of ``import horovod.keras as hvd``.

Horovod kept ``horovod.keras`` for standalone Keras; with Keras 3 that is TensorFlow's Keras, so
this is :mod:`blinkflow.tensorflow.keras` under a second name (the same module object).
Importing it imports TensorFlow and Keras.
"""
import sys

from blinkflow.tensorflow import keras as _keras

sys.modules[__name__] = _keras
