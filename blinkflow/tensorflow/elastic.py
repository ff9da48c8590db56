"""``hvd.elastic`` for TensorFlow (Horovod's ``horovod.tensorflow.elastic``): the ``run``
decorator and the states that hold TensorFlow variables and Keras models.

A state lives in memory: ``commit()`` copies the variables (``tf.identity``) on each rank,
``restore()`` assigns the copies back after a reset, ``sync()`` broadcasts the variables from
rank 0 of the re-formed job (the lowest surviving rank) and saves them. The reset itself, the
framework-neutral states and the loop are :mod:`blinkflow.elastic`.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from ..elastic import reform, reform_on, resets  # noqa: F401
from ..elastic.hosts import HostUpdateResult, notify_hosts_updated  # noqa: F401
from ..elastic.run import run_fn
from ..elastic.state import ObjectState, State  # noqa: F401
from ..errors import (EpochResumedInterrupt, HorovodInternalError, HostsUpdatedInterrupt, PartitionError,  # noqa: F401
                      RanksLostError, TooFewRanksError)
from .objects import broadcast_object
from .variables import broadcast_variables


def run(func):
    """Horovod's ``@hvd.elastic.run``: ``func(state, ...)`` runs, and after a rank is lost (or
    hosts change) the job re-forms, the state rolls back to its last commit and is synced from
    rank 0, and ``func`` runs again; see :mod:`blinkflow.elastic.run`."""
    return run_fn(func)


def _rank() -> int:
    from ..runtime.api import rank

    return rank()


class TensorFlowState(ObjectState):
    """Horovod's ``TensorFlowState``: ``variables`` (tf.Variable or Keras variables; TF2 eager
    code must pass them) plus the keyword arguments as attributes (see :class:`ObjectState`)."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None or variables is None:
            raise TypeError("blinkflow's TensorFlowState runs eagerly (TensorFlow 2): pass variables=[...]; "
                            "TF1 sessions are not supported")
        self.variables = list(variables)
        self._saved_variables = _copies(self.variables)
        super().__init__(bcast_object=broadcast_object, get_rank=_rank, **kwargs)

    def save(self) -> None:
        self._saved_variables = _copies(self.variables)
        super().save()

    def restore(self) -> None:
        _assign(self.variables, self._saved_variables)
        super().restore()

    def sync(self) -> None:
        if self.variables:
            broadcast_variables(self.variables, root_rank=0)
        self._saved_variables = _copies(self.variables)
        super().sync()


class TensorFlowKerasState(ObjectState):
    """Horovod's ``TensorFlowKerasState``: a Keras ``model`` and its ``optimizer`` (default
    ``model.optimizer``, none for a model not compiled), plus the keyword arguments as attributes
    (``batch``, ``epoch``)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        self._save_model()
        super().__init__(bcast_object=broadcast_object, get_rank=_rank, **kwargs)

    def save(self) -> None:
        self._save_model()
        super().save()

    def restore(self) -> None:
        self._load_model()
        super().restore()

    def sync(self) -> None:
        variables = self._variables()
        if variables:
            broadcast_variables(variables, root_rank=0)
        self._save_model()
        super().sync()

    def _variables(self):
        return list(self.model.variables) + _optimizer_variables(self.optimizer)

    def _save_model(self) -> None:
        # Saved per list, not zipped with the variables: an optimizer creates its slots at the
        # first step, so a state made before training has none yet (restored: nothing to assign).
        self._saved_model_state = _copies(self.model.variables)
        self._saved_optimizer_state = _copies(_optimizer_variables(self.optimizer))

    def _load_model(self) -> None:
        _assign(self.model.variables, self._saved_model_state)
        optimizer_variables = _optimizer_variables(self.optimizer)
        if len(optimizer_variables) == len(self._saved_optimizer_state):
            _assign(optimizer_variables, self._saved_optimizer_state)


def _optimizer_variables(optimizer) -> list:
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def _copies(variables) -> list:
    return [tf.identity(tf.convert_to_tensor(v)) for v in variables]


def _assign(variables, values: Optional[list]) -> None:
    for variable, value in zip(variables, values or []):
        variable.assign(value)
