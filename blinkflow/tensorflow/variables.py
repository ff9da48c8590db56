"""Making every rank's variables equal to the root's: ``broadcast_variables``, and for TF1-style
graphs Horovod's ``broadcast_global_variables`` and ``BroadcastGlobalVariablesHook``."""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from . import _naming, ops
from .rank_ops import set_id


def _in_tf1_graph() -> bool:
    """Building a TF1-style graph (run later by a Session), not eager nor a tf.function."""
    return not tf.executing_eagerly() and not tf.compat.v1.get_default_graph().building_function


@tf.autograph.experimental.do_not_convert
def broadcast_variables(variables, root_rank: int = 0, process_set=None, inplace: bool = False,
                        name: Optional[str] = None):
    """Assign ``root_rank``'s values to ``variables`` (tf.Variable or Keras variables) on every rank
    of ``process_set`` (``root_rank`` is a global rank). ``inplace`` is Horovod's switch to its
    in-place kernel; the assignment here is one either way.

    All values cross in one runtime call. Eagerly and inside ``tf.function`` the assignments
    happen and the broadcast values are returned (a list of tensors); in a TF1 graph the result
    is the op that assigns them (Horovod's ``tf.group``), for ``Session.run``.
    """
    variables = list(variables)
    # Named also for no variables: every rank negotiates the call.
    name = _naming.resolve(name, "broadcast_variables", set_id(process_set))
    values = ops.grouped_broadcast([tf.convert_to_tensor(v) for v in variables], root_rank, name=name,
                                   process_set=process_set)
    if _in_tf1_graph():
        return tf.group(*[variable.assign(value) for variable, value in zip(variables, values)])
    for variable, value in zip(variables, values):
        variable.assign(value)
    return values


def broadcast_global_variables(root_rank: int = 0):
    """Broadcast every global variable of the default TF1 graph from ``root_rank`` (Horovod's;
    deprecated with TensorFlow 2 there too): returns the op to run. Eagerly a RuntimeError, as
    in Horovod: broadcast the model's and optimizer's variables with ``broadcast_variables``."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution; use "
                           "hvd.broadcast_variables(<model/optimizer variables>) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """A TF1 ``SessionRunHook`` that broadcasts every global variable from ``root_rank`` once the
    session is created (``MonitoredTrainingSession``), so ranks that start from random weights or
    a checkpoint become identical. ``device`` is accepted for Horovod's signature."""

    def __init__(self, root_rank: int, device: str = ""):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op = None

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
