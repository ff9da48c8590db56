"""Runtime errors inside a graph keep their meaning as ``tf.errors`` (DESIGN §3.4).

``tf.numpy_function`` reports any Python exception as ``UnknownError``. So the bridge's Python
function does not raise: it returns its outputs plus a status (code, message), and the tiny C++ op
``BlinkflowRaiseOnError`` (``raise_on_error_op.cc``, compiled once per TensorFlow version into
``~/.cache/blinkflow``) fails the step with that code and message. A cross-rank mismatch thus
arrives as ``tf.errors.FailedPreconditionError`` carrying the runtime's text. Without a C++
compiler the error still surfaces, as ``UnknownError`` with the same message.
"""
from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import threading

import numpy as np
import tensorflow as tf

from ..errors import (BlinkflowError, DuplicateNameError, InvalidArgumentError, NotInitializedError, ShutdownError,
                      TensorMismatchError)

log = logging.getLogger(__name__)

STATUS_DTYPES = [tf.int32, tf.string]
_OK = 0
# absl status codes (the numbering of tf.errors).
_CODES = [
    (TensorMismatchError, tf.errors.FAILED_PRECONDITION),
    (InvalidArgumentError, tf.errors.INVALID_ARGUMENT),
    (DuplicateNameError, tf.errors.FAILED_PRECONDITION),
    (NotInitializedError, tf.errors.FAILED_PRECONDITION),
    (ShutdownError, tf.errors.ABORTED),
    (BlinkflowError, tf.errors.INTERNAL),
]
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raise_on_error_op.cc")
_lock = threading.Lock()
_module = None
_tried = False


def code_of(error: BlinkflowError) -> int:
    for kind, code in _CODES:
        if isinstance(error, kind):
            return code
    return tf.errors.UNKNOWN


def ok(outputs):
    return list(outputs) + [np.int32(_OK), np.bytes_(b"")]


def failed(error: BlinkflowError, out_dtypes):
    """Placeholder outputs (never read: the raise op fails first) and the error's status."""
    dummies = [np.zeros((), dtype=d.as_numpy_dtype) for d in out_dtypes]
    message = f"{type(error).__name__}: {error}"
    return dummies + [np.int32(code_of(error)), np.bytes_(message.encode("utf-8", "replace"))]


def raise_on_failure(outputs, status):
    """Outputs that exist only after the status was checked."""
    code, message = status
    code.set_shape([])
    message.set_shape([])
    module = _load_op()
    if module is not None:
        check = module.blinkflow_raise_on_error(code, message)
    else:
        check = tf.numpy_function(_raise_unknown, [code, message], [], stateful=True)
    with tf.control_dependencies([check]):
        return [tf.identity(o) for o in outputs]


def _raise_unknown(code, message):
    if code != _OK:
        raise RuntimeError(message.decode("utf-8", "replace"))
    return []


def _library_path() -> str:
    cache = os.path.join(os.path.expanduser("~"), ".cache", "blinkflow")
    return os.path.join(cache, f"raise_on_error_op-tf{tf.__version__}.so")


def _compile(target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # Compile to a private file and rename: ranks that compile at once never load a half-written
    # library (rename is atomic on one file system).
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(target))
    os.close(fd)
    cmd = (["g++", "-shared", "-fPIC", "-O1", "-w", _SOURCE, "-o", tmp] + tf.sysconfig.get_compile_flags()
           + tf.sysconfig.get_link_flags())
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _load_op():
    """The compiled op module, or None when it cannot be built here (logged once)."""
    global _module, _tried
    with _lock:
        if _tried:
            return _module
        _tried = True
        target = _library_path()
        try:
            if not os.path.exists(target):
                _compile(target)
            _module = tf.load_op_library(target)
        except (OSError, subprocess.SubprocessError, tf.errors.OpError) as error:
            detail = getattr(error, "stderr", "") or error
            log.warning("blinkflow: cannot build %s (%s); runtime errors inside tf.function will "
                        "surface as tf.errors.UnknownError", _SOURCE, str(detail)[-500:])
        return _module
