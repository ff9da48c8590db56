"""Runs examples/keras_mnist.py (``make demo``'s job) unchanged, timing every training step on
every rank (batch begin to end, which includes the gradients' all-reduce), and prints per rank
each epoch's first-step time against the median step: how docs/benchmarks.md checks the demo
for epoch-start stalls.

    blinkrun -np 2 python examples/demo_steps.py [keras_mnist.py's arguments]
"""
import os
import runpy
import statistics
import sys
import time

import keras

times = []


class StepTimes(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.t = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        times.append((self.epoch, batch, time.perf_counter() - self.t))


original_fit = keras.Model.fit


def fit(self, *args, **kwargs):
    kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [StepTimes()]
    return original_fit(self, *args, **kwargs)


keras.Model.fit = fit
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keras_mnist.py")
sys.argv = [script] + sys.argv[1:]
runpy.run_path(script, run_name="__main__")
import blinkflow.tensorflow as hvd  # noqa: E402

median = statistics.median(t for _, _, t in times)
firsts = [t for _, b, t in times if b == 0]
later = firsts[1:] or firsts  # the first epoch's first step traces the step function
print(f"STEPS rank {hvd.rank()}: median step {median * 1e3:.1f} ms; first steps (ms) "
      f"{[round(t * 1e3, 1) for t in firsts]}; worst first step after the first epoch / median "
      f"{max(later) / median:.2f}", flush=True)
