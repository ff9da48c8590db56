"""Run under mpirun: ``examples/keras_mnist.py`` (the demo), counting what stalls an epoch's first step.

The demo's first batch of some epochs took 350-580 ms instead of ~20: Keras rebuilt the data
iterator every epoch, and the old one was torn down (joining tf.data's threads, 0.05-0.6 s on a
busy machine) when the first step of the next epoch began, on one rank at a time, while the
others waited for it in that step's all-reduce. How long it takes depends on the machine; that
it happens does not. So this counts, on every rank, the data iterators torn down between an
epoch's start and the end of its first step (after the first epoch): a stall-free first step
tears down nothing, like every other step.

Usage: python epoch_start_script.py EXAMPLE [its arguments]. Prints
``EPOCH STARTS <rank> teardowns=<n> first_steps=<k>``.
"""
import os
import runpy
import sys
import weakref

from tensorflow.python.data.ops import iterator_ops

import keras

state = {"window": False, "teardowns": 0, "first_steps": 0, "epoch": -1}


def _torn_down():
    if state["window"]:
        state["teardowns"] += 1


_init = iterator_ops.OwnedIterator.__init__


def _counted_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    weakref.finalize(self, _torn_down)  # runs as the iterator (and its tf.data threads) goes


iterator_ops.OwnedIterator.__init__ = _counted_init


class FirstStepWindow(keras.callbacks.Callback):
    """Open from an epoch's start (after the first) to the end of its first step."""

    def on_epoch_begin(self, epoch, logs=None):
        state["epoch"] = epoch
        state["window"] = epoch > 0

    def on_train_batch_end(self, batch, logs=None):
        if state["window"]:
            state["first_steps"] += 1
        state["window"] = False


_fit = keras.Model.fit


def _fit_with_window(self, *args, callbacks=None, **kwargs):
    return _fit(self, *args, callbacks=[FirstStepWindow()] + list(callbacks or []), **kwargs)


keras.Model.fit = _fit_with_window
example = sys.argv[1]
sys.argv = [example] + sys.argv[2:]
sys.path.insert(0, os.path.dirname(os.path.abspath(example)))   # as `python example.py` has it
runpy.run_path(example, run_name="__main__")
import blinkflow  # noqa: E402  (the example started it)

print(f"EPOCH STARTS {blinkflow.rank()} teardowns={state['teardowns']} first_steps={state['first_steps']}",
      flush=True)
