"""``model.fit`` aligns its epochs across ranks even when none of its callbacks does.

The gradients' names are the same every step, so with shards of 6 and 4 batches nothing in a
name tells rank 1's epoch 2 from rank 0's epoch 1: rank 1's next-epoch gradients would be
averaged with rank 0's last batches, silently, and the job would end in a stall once rank 1's
``fit`` returned. Epoch alignment (:mod:`.uneven_epochs`) prevents it, and the blinkflow
callbacks do it; a ``fit`` given none of them gets an :class:`~.callbacks.AlignEpochsCallback`,
put first so that the user's epoch-end callbacks see aligned weights. Keras 3 offers no hook
for that, so the first :class:`DistributedOptimizer` wraps ``keras.Model.fit`` once; the wrapper
changes nothing for a model whose optimizer is not a DistributedOptimizer over every rank (one
over a process set is left alone: ``join`` is the job's), or in a job of one rank.
"""
from __future__ import annotations

import functools
import inspect
import weakref

from .callbacks import AlignEpochsCallback, BroadcastGlobalVariablesCallback, MetricAverageCallback

_ALIGNING = (AlignEpochsCallback, BroadcastGlobalVariablesCallback, MetricAverageCallback)
"""Callbacks that align a fit's epochs themselves."""
_over_every_rank: "weakref.WeakSet" = weakref.WeakSet()
"""DistributedOptimizers that reduce over the global set."""


def align_fits_of(optimizer) -> None:
    """Make every ``keras.Model.fit`` of a model compiled with ``optimizer`` (a
    DistributedOptimizer over every rank) align its epochs when none of its callbacks does."""
    _over_every_rank.add(optimizer)
    _wrap_fit()


def _wrap_fit() -> None:
    import keras

    fit = keras.Model.fit
    if getattr(fit, "blinkflow_aligns_epochs", False):
        return
    signature = inspect.signature(fit)

    @functools.wraps(fit)
    def fit_with_aligned_epochs(self, *args, **kwargs):
        if _needs_alignment(getattr(self, "optimizer", None)):
            bound = signature.bind(self, *args, **kwargs)
            bound.arguments["callbacks"] = with_alignment(self, bound.arguments.get("callbacks"))
            return fit(*bound.args, **bound.kwargs)
        return fit(self, *args, **kwargs)

    fit_with_aligned_epochs.blinkflow_aligns_epochs = True
    keras.Model.fit = fit_with_aligned_epochs


def _needs_alignment(optimizer) -> bool:
    """Whether a fit with ``optimizer`` runs in step with other ranks (a DistributedOptimizer
    over every rank of a running job of more than one)."""
    from ...runtime.global_state import RUNTIME

    try:
        registered = optimizer in _over_every_rank
    except TypeError:  # not weakly referenceable: not ours
        return False
    return registered and RUNTIME.engine is not None and RUNTIME.engine.job.size > 1


def with_alignment(model, callbacks):
    """``callbacks`` (None, a list or a Keras CallbackList) with an AlignEpochsCallback first,
    unless one of them aligns epochs already."""
    import keras

    if isinstance(callbacks, keras.callbacks.CallbackList):
        if not any(isinstance(c, _ALIGNING) for c in callbacks.callbacks):
            align_epochs = AlignEpochsCallback()
            align_epochs.set_model(model)
            callbacks.callbacks.insert(0, align_epochs)
        return callbacks
    callbacks = list(callbacks or [])
    if any(isinstance(c, _ALIGNING) for c in callbacks):
        return callbacks
    return [AlignEpochsCallback()] + callbacks
