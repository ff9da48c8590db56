"""Every TensorFlow / Keras version check of blinkflow lives here, and nowhere else.

blinkflow targets TensorFlow >= 2.16, where ``tf.keras`` is Keras 3. Keras 3 changed what
Horovod's bindings relied on: variables have no ``.ref()`` (Keras variables hash by identity),
``optimizer.variables`` is a property, ``lr`` became ``learning_rate``, ``model.fit`` calls
``optimizer.apply_gradients`` -> ``apply`` directly, and ``keras.optimizers.legacy`` is gone.
The rest of the package uses the helpers below instead of probing versions itself.
"""
from __future__ import annotations

import tensorflow as tf
import keras

from ..errors import BlinkflowError

MIN_TF = (2, 16)
MIN_KERAS = (3, 0)


def _version_tuple(text: str):
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check_versions() -> None:
    """Fail early, with the fix, on a TensorFlow or Keras too old for these bindings."""
    if _version_tuple(tf.__version__) < MIN_TF:
        raise BlinkflowError(f"blinkflow.tensorflow needs TensorFlow >= 2.16 (found {tf.__version__}); "
                             "pip install -U 'tensorflow>=2.16'")
    if _version_tuple(keras.__version__) < MIN_KERAS:
        raise BlinkflowError(f"blinkflow.tensorflow needs Keras 3 (found {keras.__version__}); pip install -U keras")


def is_tf_object(value) -> bool:
    """A tf.Tensor, tf.Variable, IndexedSlices or Keras variable (what the bindings accept)."""
    return isinstance(value, (tf.Tensor, tf.Variable, tf.IndexedSlices, keras.Variable))


def to_tensor(value) -> tf.Tensor:
    """Read a tf.Variable or Keras variable as a tensor (differentiably); tensors pass through."""
    if isinstance(value, tf.Tensor):
        return value
    return tf.convert_to_tensor(value)


def assign(variable, value) -> None:
    """``assign`` on a tf.Variable and on a Keras 3 variable alike."""
    variable.assign(value)


def learning_rate_of(optimizer) -> float:
    """The current learning rate as a float (Keras 3 keeps it in a variable, named ``learning_rate``)."""
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


check_versions()
