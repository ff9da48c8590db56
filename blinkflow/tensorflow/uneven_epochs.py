"""Epochs of different lengths on different ranks in ``model.fit``.

When rank 1's shard has 4 batches and rank 0's has 6, rank 1's epoch ends first. Were it to go
on, its next epoch's gradients would be averaged with rank 0's last batches, and at the end
rank 0 would wait for a rank that has finished. So at the end of every epoch each rank *joins*
(:func:`blinkflow.join`): while rank 0 runs its last batches, rank 1 takes part in their
all-reduces with zeros (its contribution counts as absent; Average still divides by the set's
size) and in their all-gathers with no rows. Once every rank has joined, every rank takes the
model's weights and the optimizer's state from the rank that joined last — it applied every
step, including those the others sat out — so all ranks start the next epoch alike, and the
callbacks that reduce metrics run after that, in step.

The blinkflow Keras callbacks call :func:`align` at the end of each epoch, once per epoch
whichever of them runs first. A ``fit`` given none of them aligns all the same: a
``DistributedOptimizer`` makes ``keras.Model.fit`` put an :class:`~.callbacks.AlignEpochsCallback`
first among the callbacks of a model it optimizes (:func:`align_every_fit`). Without it, with
the gradients' names the same every step, rank 1's epoch-2 gradients would be averaged with rank
0's epoch-1 ones, silently, and the job would end in a stall when rank 1's ``fit`` returned. A
model whose optimizer reduces over a process set other than the global one is left alone
(:func:`blinkflow.join` is the job's). A custom loop does the same by hand::

    for batch in my_shard:                       # any number of batches on each rank
        train_step(batch)                        # DistributedGradientTape inside
    last = bf.join()
    bf.broadcast_variables(model.weights + optimizer.variables, root_rank=last)
"""
from __future__ import annotations

import functools
import inspect
import weakref

_aligned_epoch: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""model -> the last epoch of the current ``fit`` whose end was aligned."""


def start_training(model) -> None:
    """Forget what an earlier ``fit`` of ``model`` aligned (its epochs count from 0 again)."""
    _aligned_epoch.pop(model, None)


def align(model, epoch: int) -> None:
    """Wait, joined, for every rank's epoch ``epoch`` to end; then give every rank the weights and
    optimizer state of the rank that joined last. Once per epoch: later calls return at once."""
    if _aligned_epoch.get(model) == epoch:
        return
    _aligned_epoch[model] = epoch
    from ..runtime import api
    from .variables import broadcast_variables

    if api.size() == 1:
        return
    last = api.join()
    optimizer = getattr(model, "optimizer", None)
    state = list(model.weights) + (list(optimizer.variables) if optimizer is not None else [])
    # Metrics' variables stay each rank's own: MetricAverageCallback averages what each counted.
    broadcast_variables(state, last, name=f"AlignEpoch.{epoch}")


def align_every_fit() -> None:
    """Make ``keras.Model.fit`` of a model compiled with a :class:`DistributedOptimizer` (over the
    global set, more than one rank) align its epochs when none of its callbacks does: an
    :class:`AlignEpochsCallback` goes first, so the user's epoch-end callbacks see aligned
    weights. Idempotent; the first ``DistributedOptimizer`` installs it."""
    import keras

    fit = keras.Model.fit
    if getattr(fit, "blinkflow_aligns_epochs", False):
        return
    signature = inspect.signature(fit)

    @functools.wraps(fit)
    def fit_with_aligned_epochs(self, *args, **kwargs):
        if _reduces_over_every_rank(getattr(self, "optimizer", None)):
            bound = signature.bind(self, *args, **kwargs)
            bound.arguments["callbacks"] = _with_alignment(self, bound.arguments.get("callbacks"))
            return fit(*bound.args, **bound.kwargs)
        return fit(self, *args, **kwargs)

    fit_with_aligned_epochs.blinkflow_aligns_epochs = True
    keras.Model.fit = fit_with_aligned_epochs


def _reduces_over_every_rank(optimizer) -> bool:
    """Whether ``optimizer`` is a DistributedOptimizer over the global set of a running job of
    more than one rank."""
    from ..runtime.global_state import RUNTIME
    from .optimizer import DistributedOptimizer

    if not isinstance(optimizer, DistributedOptimizer) or RUNTIME.engine is None:
        return False
    return optimizer._reducer.process_set is None and RUNTIME.engine.job.size > 1


def _with_alignment(model, callbacks):
    """``callbacks`` (None, a list or a Keras CallbackList) with an AlignEpochsCallback first,
    unless one of them aligns epochs already."""
    import keras

    from .callbacks import AlignEpochsCallback, BroadcastGlobalVariablesCallback, MetricAverageCallback

    aligning = (AlignEpochsCallback, BroadcastGlobalVariablesCallback, MetricAverageCallback)
    if isinstance(callbacks, keras.callbacks.CallbackList):
        if not any(isinstance(c, aligning) for c in callbacks.callbacks):
            align_epochs = AlignEpochsCallback()
            align_epochs.set_model(model)
            callbacks.callbacks.insert(0, align_epochs)
        return callbacks
    callbacks = list(callbacks or [])
    if any(isinstance(c, aligning) for c in callbacks):
        return callbacks
    return [AlignEpochsCallback()] + callbacks
