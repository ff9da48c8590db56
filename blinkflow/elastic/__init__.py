"""Elastic training: a job that loses ranks re-forms on the survivors, re-plans its trees for
exactly their devices, rolls its state back to the last commit, and goes on.

:mod:`.reform` is the one reset (retire the old runtime, agree on who is left, start again);
:mod:`.quorum` decides which group of survivors may go on, so a network cut never makes two jobs;
:mod:`.state` holds Horovod's ``State`` and ``ObjectState``; :mod:`.run` the retrying
``run`` decorator. The TensorFlow and Keras states and callbacks are in
``blinkflow.tensorflow.elastic`` and ``blinkflow.tensorflow.keras.elastic``.
"""
from .reform import Reset, history, reform, reform_on, resets

__all__ = ["Reset", "history", "reform", "reform_on", "resets"]
