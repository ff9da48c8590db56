"""Runtime errors keep their meaning as ``tf.errors`` (a mismatch is a ``FailedPreconditionError``):
in a graph, and eagerly.

Eagerly a call on TF tensors raises the blinkflow error as a class that is both: e.g. a
cross-rank mismatch is a ``blinkflow.TensorMismatchError`` and a
``tf.errors.FailedPreconditionError`` (:func:`as_tf_error`), so Horovod code that catches
``tf.errors.*`` and blinkflow code that catches blinkflow's classes both work.

``tf.numpy_function`` reports any Python exception as ``UnknownError``. So a crossing's Python
function does not raise: it returns its outputs plus a status (code, message), and the tiny C++ op
``BlinkflowRaiseOnError`` (``raise_on_error_op.cc``, compiled once per TensorFlow version into
``~/.cache/blinkflow`` by :mod:`.._op_library`) fails the step with that code and message. A cross-rank mismatch thus
arrives as ``tf.errors.FailedPreconditionError`` carrying the runtime's text. Without a C++
compiler the error still surfaces, as ``UnknownError`` with the same message.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from ...errors import (BlinkflowError, DuplicateNameError, InvalidArgumentError, NotInitializedError,
                      NotSupportedError, ProcessSetError, ShutdownError, TensorMismatchError)
from .. import _op_library

STATUS_DTYPES = [tf.int64, tf.uint8]
"""The status a crossing returns beside its outputs: an int64 code and the message's UTF-8 bytes.
Types ``EagerPyFunc`` has GPU kernels for: one int32 or string input or output puts the whole op
on the CPU, and TensorFlow then copies every GPU tensor down to it and the results back up. The
op that raises (``BlinkflowRaiseOnError``) takes them as they are, on the host (a scalar and a
message that is empty unless the step failed): no op converts them in between."""
_OK = 0
# absl status codes (the numbering of tf.errors).
_CODES = [
    (TensorMismatchError, tf.errors.FAILED_PRECONDITION),
    (InvalidArgumentError, tf.errors.INVALID_ARGUMENT),
    (ProcessSetError, tf.errors.INVALID_ARGUMENT),
    (NotSupportedError, tf.errors.UNIMPLEMENTED),
    (DuplicateNameError, tf.errors.FAILED_PRECONDITION),
    (NotInitializedError, tf.errors.FAILED_PRECONDITION),
    (ShutdownError, tf.errors.ABORTED),
    (BlinkflowError, tf.errors.INTERNAL),
]


def code_of(error: BlinkflowError) -> int:
    for kind, code in _CODES:
        if isinstance(error, kind):
            return code
    return tf.errors.UNKNOWN


_TF_CLASSES = {tf.errors.FAILED_PRECONDITION: tf.errors.FailedPreconditionError,
               tf.errors.INVALID_ARGUMENT: tf.errors.InvalidArgumentError, tf.errors.ABORTED: tf.errors.AbortedError,
               tf.errors.UNIMPLEMENTED: tf.errors.UnimplementedError, tf.errors.INTERNAL: tf.errors.InternalError,
               tf.errors.UNKNOWN: tf.errors.UnknownError}
_both = {}


def as_tf_error(error: BlinkflowError) -> BaseException:
    """``error`` as an instance of its blinkflow class and of the ``tf.errors`` class of its code
    (same message and attributes: ``rank``, ``name``, ``ranks``)."""
    if isinstance(error, tf.errors.OpError):
        return error
    kind = type(error)
    tf_class = _TF_CLASSES[code_of(error)]
    both = _both.get(kind)
    if both is None:
        both = _both[kind] = type(kind.__name__, (kind, tf_class), {"__module__": kind.__module__,
                                                                     "__init__": _init_both,
                                                                     "__reduce__": _reduce_both})
    out = both.__new__(both)
    tf_class.__init__(out, None, None, str(error))
    out.__dict__.update({k: v for k, v in error.__dict__.items() if k not in out.__dict__})
    return out


def _init_both(self, message, *args, **kwargs):
    # Built by as_tf_error; a direct call (a copy, a re-raise) keeps the message.
    tf.errors.OpError.__init__(self, None, None, message, code_of(self))


def _reduce_both(self):
    return (type(self), (self.message,), dict(self.__dict__))


def ok(outputs):
    return list(outputs) + [np.int64(_OK), np.zeros(0, np.uint8)]


def failed(error: BlinkflowError, out_dtypes):
    """Placeholder outputs (never read: the raise op fails first) and the error's status."""
    dummies = [np.zeros((), dtype=d.as_numpy_dtype) for d in out_dtypes]
    message = f"{type(error).__name__}: {error}"
    return dummies + [np.int64(code_of(error)), np.frombuffer(message.encode("utf-8", "replace"), np.uint8).copy()]


def raise_on_failure(outputs, status):
    """Outputs that exist only after the status was checked."""
    code, message = status
    code.set_shape([])
    message.set_shape([None])
    module = _load_op()
    with tf.device("/CPU:0"):  # the raising op is a host op: a GPU route's status is copied down
        if module is not None:
            check = module.blinkflow_raise_on_error(code, message)
        else:
            check = tf.numpy_function(_raise_unknown, [code, message], [], stateful=True)
    with tf.control_dependencies([check]):
        return [tf.identity(o) for o in outputs]


def _raise_unknown(code, message):
    if code != _OK:
        raise RuntimeError(message.tobytes().decode("utf-8", "replace"))
    return []


def _load_op():
    """The compiled ops (:mod:`.._op_library`), or None without a C++ compiler."""
    return _op_library.load()
