"""The bindings' C++ ops, compiled on first graph use with ``g++`` against the installed
TensorFlow's headers, once per TensorFlow version, into ``~/.cache/blinkflow``:

* ``BlinkflowRaiseOnError`` (``raise_on_error_op.cc``): a runtime error keeps its ``tf.errors``
  code inside a graph (:mod:`._errors`);
* ``BlinkflowAwait`` (``await_op.cc``): an asynchronous kernel that waits for a collective
  without holding a thread, for TF1-style graphs (:mod:`._tf1`).

Without a compiler both degrade (logged once): errors surface as ``UnknownError``, and TF1
graphs wait for collectives on TensorFlow's threads.
"""
from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import tempfile
import threading
from typing import Optional

import tensorflow as tf

log = logging.getLogger(__name__)
_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = [os.path.join(_HERE, "raise_on_error_op.cc"), os.path.join(_HERE, "await_op.cc")]
_lock = threading.Lock()
_module = None
_native: Optional[ctypes.CDLL] = None
_tried = False


def library_path() -> str:
    cache = os.path.join(os.path.expanduser("~"), ".cache", "blinkflow")
    return os.path.join(cache, f"blinkflow_ops-tf{tf.__version__}.so")


def _compile(target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # Compile to a private file and rename: ranks that compile at once never load a half-written
    # library (rename is atomic on one file system).
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(target))
    os.close(fd)
    cmd = (["g++", "-shared", "-fPIC", "-O1", "-w"] + SOURCES + ["-o", tmp] + tf.sysconfig.get_compile_flags()
           + tf.sysconfig.get_link_flags())
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load():
    """The compiled op module (``tf.load_op_library``), or None when it cannot be built here."""
    global _module, _native, _tried
    with _lock:
        if _tried:
            return _module
        _tried = True
        target = library_path()
        try:
            if not os.path.exists(target):
                _compile(target)
            _module = tf.load_op_library(target)
            _native = ctypes.CDLL(target)  # the same library: blinkflow_mark_done for Python
            _native.blinkflow_mark_done.argtypes = [ctypes.c_longlong]
        except (OSError, subprocess.SubprocessError, tf.errors.OpError) as error:
            _module = _native = None
            detail = getattr(error, "stderr", "") or error
            log.warning("blinkflow: cannot build %s (%s); runtime errors inside graphs will surface as "
                        "tf.errors.UnknownError, and TF1 graphs wait for collectives on TensorFlow's threads",
                        ", ".join(SOURCES), str(detail)[-500:])
        return _module


def mark_done(ticket: int) -> None:
    """Resume the ``BlinkflowAwait`` kernel of ``ticket`` (or let it pass at once when it runs)."""
    _native.blinkflow_mark_done(ticket)
