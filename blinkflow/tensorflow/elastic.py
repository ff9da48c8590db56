"""``hvd.elastic`` (Horovod's elastic training): the names exist, and using any raises
``NotImplementedError`` naming what to do instead.

Horovod's elastic mode lets ranks join and leave a running job (``horovodrun --min-np``,
``hvd.elastic.run`` retrying the training function on a new set of ranks after committing its
``State``). blinkflow plans its trees for a fixed set of devices at ``init`` and has no
re-rendezvous yet: a job runs on a fixed number of ranks, and a failed rank stops every rank with
an error naming it (docs/reliability.md). The alternative until it exists: checkpoint
(``keras.callbacks.ModelCheckpoint`` / ``tf.train.Checkpoint`` on rank 0) and restart the job
with ``blinkrun``, resuming from the last checkpoint.
"""
from __future__ import annotations

WHY = ("blinkflow does not support elastic training yet (hvd.elastic): a job runs on a fixed set of ranks, "
       "planned at init. Instead, save checkpoints (keras.callbacks.ModelCheckpoint or tf.train.Checkpoint on "
       "rank 0) and restart the job with blinkrun from the last one.")


def _unsupported(what: str):
    raise NotImplementedError(f"{what}: {WHY}")


def run(func):
    """Horovod's ``@hvd.elastic.run`` decorator: not supported yet (raises NotImplementedError)."""
    _unsupported("hvd.elastic.run")


class Unsupported:
    """A Horovod elastic class: constructing one raises NotImplementedError naming it."""

    def __init__(self, *args, **kwargs):
        _unsupported(f"hvd.elastic.{type(self).__name__}")


class State(Unsupported):
    """Horovod's elastic state: not supported yet (raises NotImplementedError)."""


class ObjectState(State):
    """Horovod's elastic state of an object's attributes: constructing one raises (see the module)."""


class TensorFlowState(State):
    """Horovod's elastic state of TensorFlow variables: constructing one raises (see the module)."""


class TensorFlowKerasState(State):
    """Horovod's elastic state of a Keras model and optimizer: constructing one raises (see the module)."""
