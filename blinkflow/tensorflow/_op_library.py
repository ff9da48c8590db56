"""The bindings' C++ ops, compiled on first use with ``g++`` against the installed TensorFlow's
headers into blinkflow's cache folder (``$XDG_CACHE_HOME/blinkflow``, else ``~/.cache/blinkflow``:
:func:`blinkflow.config.cache_dir`), once per TensorFlow version and source text:

* the graph ops (:func:`load`): ``BlinkflowRaiseOnError`` (``raise_on_error_op.cc``), a runtime
  error keeps its ``tf.errors`` code inside a graph (:mod:`.crossing.errors`); ``BlinkflowAwait``
  (``await_op.cc``), an asynchronous kernel that waits for a collective without holding a
  thread, for TF1-style graphs (:mod:`.crossing.tf1`);
* the XLA op (:func:`load_xla`): ``BlinkflowXlaCall`` (``xla_call_op.cc``), a collective inside
  an XLA cluster, lowered to a custom call (:mod:`.crossing.xla`). It links ``libtensorflow_cc`` (where
  TensorFlow keeps its XLA bridge), so it is a library of its own: a TensorFlow whose XLA headers
  do not compile still gets the graph ops.

What is loaded is trusted code, so the cache is guarded (:mod:`._library_cache`): the folder is
made 0700, and a library that is not a regular file owned by this user, or that its group or
others may write, is removed and built again, never loaded. The compiler runs tied to its
process (:func:`blinkflow.child_process.run_tied`): killed with it, children included. It
writes to a temporary file named after its host and process, renamed into place when done; the
next build removes those whose process is gone.

Without a compiler the graph ops degrade (logged once): errors surface as ``UnknownError``, and
TF1 graphs wait for collectives on TensorFlow's threads. Without the XLA op a collective inside
``jit_compile=True`` raises NotSupportedError saying how to turn XLA off.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import subprocess
import threading
from typing import List, NamedTuple, Optional

import tensorflow as tf

from ..child_process import run_tied
from ..config import cache_dir
from . import _library_cache

log = logging.getLogger(__name__)
_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = [os.path.join(_HERE, "raise_on_error_op.cc"), os.path.join(_HERE, "await_op.cc")]
XLA_SOURCES = [os.path.join(_HERE, "xla_call_op.cc")]
_lock = threading.Lock()


class Loaded(NamedTuple):
    module: object
    """The op module (``tf.load_op_library``)."""
    native: ctypes.CDLL
    """The same library, for its C functions."""


_loaded = {}


def library_path(sources: List[str], stem: str) -> str:
    """Where the library of ``sources`` is cached: keyed by TensorFlow's version and the sources'
    text, so an edited source (or another TensorFlow) never loads a stale build."""
    digest = hashlib.sha256()
    for source in sources:
        with open(source, "rb") as f:
            digest.update(f.read())
    return os.path.join(cache_dir(), f"{stem}-tf{tf.__version__}-{digest.hexdigest()[:12]}.so")


def _xla_flags() -> List[str]:
    """XLA's headers include a few third-party headers TensorFlow ships under ``external/``."""
    include = tf.sysconfig.get_include()
    flags = [f"-I{os.path.join(include, 'external', sub)}" for sub in ("highwayhash", "farmhash_archive/src")]
    return flags + [f"-L{tf.sysconfig.get_lib()}", "-l:libtensorflow_cc.so.2"]


def _compile(sources: List[str], extra: List[str], target: str) -> None:
    # Compile to a private file and rename: ranks that compile at once never load a half-written
    # library (rename is atomic on one file system).
    tmp = _library_cache.temporary_path(target)
    cmd = (["g++", "-shared", "-fPIC", "-O1", "-w"] + sources + ["-o", tmp] + tf.sysconfig.get_compile_flags()
           + tf.sysconfig.get_link_flags() + extra)
    try:
        run_tied(cmd, timeout=900)
        os.chmod(tmp, 0o700)   # whatever the umask: a library others may write is never loaded
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _build_once(sources: List[str], extra: List[str], target: str) -> str:
    """``target``, built unless a trusted build exists; the ranks of a host take turns on a lock
    file, so one compiles and the others load its result (a compile takes tens of seconds of a
    core)."""
    folder = _library_cache.private_folder(os.path.dirname(target))
    target = os.path.join(folder, os.path.basename(target))
    if _library_cache.trusted(target):
        return target
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _library_cache.remove_leftovers(folder)
        if not _library_cache.trusted(target):
            _library_cache.remove_untrusted(target)
            _compile(sources, extra, target)
    return target


def _load(key: str, sources: List[str], extra: List[str], consequence: str, signatures) -> Optional[Loaded]:
    """The library ``key`` of ``sources`` (built first if needed); ``signatures`` maps its C
    functions to their argument types."""
    with _lock:
        if key in _loaded:
            return _loaded[key]
        target = library_path(sources, f"blinkflow_{key}")
        loaded = None
        try:
            target = _build_once(sources, extra, target)
            loaded = Loaded(tf.load_op_library(target), ctypes.CDLL(target))
            for function, argtypes in signatures.items():
                getattr(loaded.native, function).argtypes = argtypes
        except (OSError, subprocess.SubprocessError, tf.errors.OpError) as error:
            detail = getattr(error, "stderr", "") or error
            log.warning("blinkflow: cannot build %s (%s); %s", ", ".join(sources), str(detail)[-500:], consequence)
        _loaded[key] = loaded
        return loaded


def load():
    """The graph ops' module, or None when it cannot be built here."""
    loaded = _load("ops", SOURCES, [], "runtime errors inside graphs will surface as tf.errors.UnknownError, "
                   "and TF1 graphs wait for collectives on TensorFlow's threads",
                   {"blinkflow_mark_done": [ctypes.c_longlong]})
    return None if loaded is None else loaded.module


def load_xla() -> Optional[Loaded]:
    """The XLA op's library, or None when it cannot be built here."""
    return _load("xla", XLA_SOURCES, _xla_flags(), "collectives inside jit_compile=True functions are refused",
                 {"blinkflow_xla_set_callback": [ctypes.c_void_p], "blinkflow_xla_register_kernels": []})


def mark_done(ticket: int) -> None:
    """Resume the ``BlinkflowAwait`` kernel of ``ticket`` (or let it pass at once when it runs)."""
    _loaded["ops"].native.blinkflow_mark_done(ticket)
