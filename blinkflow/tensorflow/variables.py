"""``broadcast_variables``: make every rank's variables equal to the root's."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from . import _naming, ops


@tf.autograph.experimental.do_not_convert
def broadcast_variables(variables, root_rank: int = 0, name: Optional[str] = None):
    """Assign ``root_rank``'s values to ``variables`` (tf.Variable or Keras variables) on every rank.

    All values cross in one runtime call. Works eagerly and inside ``tf.function``; returns the
    broadcast values (a list of tensors).
    """
    variables = list(variables)
    name = _naming.resolve(name, "broadcast_variables")  # also for none: every rank negotiates the call
    values = ops.grouped_broadcast([tf.convert_to_tensor(v) for v in variables], root_rank, name=name)
    for variable, value in zip(variables, values):
        variable.assign(value)
    return values
