"""Single-process checks of how a DistributedOptimizer makes ``model.fit`` align epochs: which
callbacks a fit gets (the multi-rank behaviour is test_uneven_fit.py's)."""
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def test_fit_gets_an_align_epochs_callback_first_unless_one_aligns_already():
    from blinkflow.tensorflow.keras import callbacks as bfc
    from blinkflow.tensorflow.keras.fit_alignment import with_alignment

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    history = keras.callbacks.History()
    got = with_alignment(model, None)
    assert len(got) == 1 and isinstance(got[0], bfc.AlignEpochsCallback)
    got = with_alignment(model, [history])
    # First: the callbacks after it see aligned weights.
    assert isinstance(got[0], bfc.AlignEpochsCallback) and got[1:] == [history]
    for aligning in (bfc.BroadcastGlobalVariablesCallback(0), bfc.MetricAverageCallback(), bfc.AlignEpochsCallback()):
        assert with_alignment(model, (history, aligning)) == [history, aligning]
    given = keras.callbacks.CallbackList([history], model=model)
    assert with_alignment(model, given) is given
    assert isinstance(given.callbacks[0], bfc.AlignEpochsCallback) and given.callbacks[0].model is model


def test_the_fit_hook_is_installed_once_and_knows_the_optimizers_over_every_rank():
    import blinkflow as bf
    import blinkflow.tensorflow as bft
    from blinkflow.tensorflow.keras.fit_alignment import _needs_alignment, _over_every_rank

    everyone = bft.DistributedOptimizer(keras.optimizers.SGD(0.1))
    fit = keras.Model.fit
    assert fit.blinkflow_aligns_epochs
    in_a_set = bft.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=bf.ProcessSet([0]))
    assert keras.Model.fit is fit
    assert everyone in _over_every_rank and in_a_set not in _over_every_rank
    # Not initialised (or one rank): a plain fit, whatever the optimizer.
    assert not _needs_alignment(everyone) and not _needs_alignment(keras.optimizers.SGD(0.1))
    assert not _needs_alignment(None)
