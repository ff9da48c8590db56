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
first among the callbacks of a model it optimizes (:mod:`.fit_alignment`). A custom loop does
the same by hand::

    for batch in my_shard:                       # any number of batches on each rank
        train_step(batch)                        # DistributedGradientTape inside
    last = bf.join()
    bf.broadcast_variables(model.weights + optimizer.variables, root_rank=last)
"""
from __future__ import annotations

import weakref

_aligned_epoch: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""model -> the last epoch of the current ``fit`` whose end was aligned."""
_kept_local: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""model -> a predicate on variables each rank keeps its own of (never aligned)."""


def keep_local(model, is_local) -> None:
    """Leave the variables for which ``is_local(variable)`` holds out of the alignment
    (``BroadcastGlobalVariablesCallback(local_variables=)``: model-parallel parts)."""
    _kept_local[model] = is_local


def start_training(model) -> None:
    """Forget what an earlier ``fit`` of ``model`` aligned (its epochs count from 0 again)."""
    _aligned_epoch.pop(model, None)


def align(model, epoch: int) -> None:
    """Wait, joined, for every rank's epoch ``epoch`` to end; then give every rank the weights and
    optimizer state of the rank that joined last. Once per epoch: later calls return at once."""
    if _aligned_epoch.get(model) == epoch:
        return
    _aligned_epoch[model] = epoch
    from ...runtime import api
    from ..variables import broadcast_variables

    if api.size() == 1:
        return
    last = api.join()
    optimizer = getattr(model, "optimizer", None)
    is_local = _kept_local.get(model, lambda variable: False)
    state = [v for v in model.weights if not is_local(v)] + (list(optimizer.variables) if optimizer is not None else [])
    # Metrics' variables stay each rank's own: MetricAverageCallback averages what each counted.
    broadcast_variables(state, last, name=f"AlignEpoch.{epoch}")

