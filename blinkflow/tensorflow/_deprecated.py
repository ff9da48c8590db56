"""Deprecated Horovod arguments that still work, and warn once per process (Horovod warns with a
``DeprecationWarning`` too; Python would show it once per call site, or never outside
``__main__``, so the first use is reported explicitly and later ones are silent)."""
from __future__ import annotations

import os
import sys
import warnings
from typing import Set

from ..ops import ReduceOp, as_reduce_op

_warned: Set[str] = set()


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_dirs():
    """blinkflow's folder and TensorFlow's (whose autograph wrappers sit between user and us)."""
    import tensorflow as tf

    return (_PACKAGE + os.sep, os.path.dirname(os.path.abspath(tf.__file__)) + os.sep)


def warn_once(key: str, message: str) -> None:
    """A DeprecationWarning for ``key``'s first use in this process, pointing at the user's line
    (the first frame outside blinkflow and TensorFlow, however deep the call came through wrappers)."""
    if key in _warned:
        return
    _warned.add(key)
    frame = sys._getframe(1)
    libraries = _library_dirs()
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(libraries):
        frame = frame.f_back
    filename, lineno = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("<blinkflow>", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("always", DeprecationWarning)  # shown once, wherever the call is
        warnings.warn_explicit(message, DeprecationWarning, filename, lineno)


def op_from(op, average, where: str) -> ReduceOp:
    """The reduce op of a call that may pass Horovod's deprecated ``average=`` (True: Average,
    False: Sum); ``op`` supersedes it, and both at once is an error (Horovod's rule). None: Average."""
    if op is not None:
        if average is not None:
            raise ValueError(f"{where}: the op parameter supersedes average; pass only one of them")
        return as_reduce_op(op)
    if average is not None:
        warn_once(f"{where}.average", f"{where}: the `average` parameter is deprecated (Horovod 0.19); pass "
                  "op=Average or op=Sum")
        return ReduceOp.AVERAGE if average else ReduceOp.SUM
    return ReduceOp.AVERAGE
