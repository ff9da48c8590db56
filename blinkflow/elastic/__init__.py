"""Elastic training: a job that loses ranks re-forms on the survivors, re-plans its trees for
exactly their devices, rolls its state back to the last commit, and goes on.

The TensorFlow and Keras states and callbacks are in ``blinkflow.tensorflow.elastic`` and
``blinkflow.tensorflow.keras.elastic``.

Modules, one job each:

``reform``  the one reset: retire the old runtime, agree on who is left, start again
``quorum``  which group of survivors may go on, so a network cut never makes two jobs
``grow``    gaining ranks: new processes join a running job
``hosts``   news of hosts added or removed, as Horovod's elastic driver sends it
``state``   Horovod's ``State`` and ``ObjectState``: what a job keeps and rolls back to
``run``     Horovod's retrying ``run`` decorator
"""
from .reform import Reset, history, reform, reform_on, resets

__all__ = ["Reset", "history", "reform", "reform_on", "resets"]
