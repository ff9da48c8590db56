"""Run a ported Horovod example as it is, only shorter: ``python run_capped.py STEPS EPOCHS
example.py [args...]`` caps ``tf.data.Dataset.take`` at STEPS batches and ``keras.Model.fit`` at
EPOCHS epochs of at most STEPS steps, then runs the example as ``__main__`` (the CPU test suite
cannot afford Horovod's 24 epochs of MNIST; the code under test is not touched)."""
import os
import runpy
import sys

import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

import keras  # noqa: E402

steps, epochs, script = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sys.argv = [script] + sys.argv[4:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))

take = tf.data.Dataset.take
tf.data.Dataset.take = lambda self, count, name=None: take(self, min(int(count), steps), name=name)
fit = keras.Model.fit


def capped_fit(self, *args, **kwargs):
    kwargs["epochs"] = min(kwargs.get("epochs", 1), epochs)
    if kwargs.get("steps_per_epoch"):
        kwargs["steps_per_epoch"] = min(kwargs["steps_per_epoch"], steps)
    return fit(self, *args, **kwargs)


keras.Model.fit = capped_fit
runpy.run_path(script, run_name="__main__")
from harness import done  # noqa: E402

done(int(os.environ["OMPI_COMM_WORLD_RANK"]))  # the example may have finalised MPI
