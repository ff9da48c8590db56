"""Host or device: where a collective's data is reduced. Decided here, and nowhere else.

``BLINKFLOW_BACKEND`` (:attr:`blinkflow.config.Config.backend`) and where the data lives answer it:

=========  ==========================================  =========================================
setting    TensorFlow tensors (the TF crossing)        arrays handed to the runtime
=========  ==========================================  =========================================
``auto``   the device when one of the call's tensors   a GPU array (CuPy's, or anything CuPy
           is on a GPU and CuPy sees a GPU; else the   takes without a copy) on the device;
           host                                        anything else on the host
``cuda``   the device (a tensor TensorFlow keeps on    as ``auto``
           the host is placed on the rank's GPU first)
``cpu``    the host (in an XLA step on a GPU, refused)  the host; a GPU array is refused
=========  ==========================================  =========================================

A whole call goes one way: the TF crossing hands the runtime numpy arrays (host) or CuPy views
by DLPack (device), the runtime reads :data:`DEVICE` or :data:`HOST` off each array
(:func:`of_array`) into the request, and the background thread hands the request to the backend
of that name. In an XLA-compiled step XLA has already placed the buffers: a custom call that XLA
hands a stream runs on the device (:func:`of_xla_call`).

The cuda backend is *usable* (:func:`cuda_usable`) when the setting is not ``cpu`` and CuPy sees
a GPU: then ``init()`` makes the rank's GPU current and TensorFlow grows its GPU memory, leaving
room for the backend. Nothing here imports TensorFlow or CuPy at module level.
"""
from __future__ import annotations

from typing import Optional, Sequence

from .config import Config, get_config
from .errors import InvalidArgumentError

HOST, DEVICE = "cpu", "cuda"
"""The two answers: the backends' names."""

_possible: dict = {}
"""Whether a TF tensor may take the device route, per configuration object (CuPy's devices do
not change while a process runs; the configuration is read again after an elastic start)."""


def cuda_usable(config: Optional[Config] = None, cupy_sees_gpu: Optional[bool] = None) -> bool:
    """Whether this process may drive a GPU through the cuda backend: the setting is not ``cpu``
    and CuPy sees a GPU (``cupy_sees_gpu``: asked of CuPy when not given)."""
    if (config or get_config()).backend == HOST:
        return False
    if cupy_sees_gpu is None:
        from .backends.cuda.device import is_available

        cupy_sees_gpu = is_available()
    return cupy_sees_gpu


def tensors_may_go_to_device() -> bool:
    """Whether any TF tensor of this process may take the device route: ``cuda`` forces it (and
    fails with a typed error where CuPy cannot), ``auto`` needs CuPy to see a GPU."""
    config = get_config()
    known = _possible.get("tensors")
    if known is None or known[0] is not config:
        possible = config.backend == DEVICE or (config.backend != HOST and cuda_usable(config))
        known = _possible["tensors"] = (config, possible)
    return known[1]


def of_tensors(tensors: Sequence) -> str:
    """:data:`DEVICE` or :data:`HOST` for one call's TF tensors (read off their ``device``
    strings: nothing is copied or synchronized to decide)."""
    if not tensors_may_go_to_device():
        return HOST
    if get_config().backend == DEVICE or any(on_gpu(t) for t in tensors):
        return DEVICE
    return HOST


def on_gpu(tensor) -> bool:
    """Whether TensorFlow placed ``tensor`` on a GPU."""
    return "GPU" in (getattr(tensor, "device", "") or "").upper()


def of_array(array) -> str:
    """:data:`DEVICE` for an array in GPU memory, else :data:`HOST`. A GPU array under
    ``BLINKFLOW_BACKEND=cpu`` is refused (InvalidArgumentError: the call is refused on this
    rank, so every rank's call under its name fails alike)."""
    from .arrays import on_device

    if not on_device(array):
        return HOST
    if get_config().backend == HOST:
        raise InvalidArgumentError("a GPU array was given but BLINKFLOW_BACKEND=cpu; pass numpy arrays, or set "
                                   "BLINKFLOW_BACKEND=auto")
    return DEVICE


def of_xla_call(stream: int) -> str:
    """Where an XLA custom call's buffers are: XLA hands a stream only to a call it placed on a
    GPU. Those are refused under ``BLINKFLOW_BACKEND=cpu`` (InvalidArgumentError, on every rank:
    the setting is the job's), since XLA already placed them where the host route cannot read."""
    if not stream:
        return HOST
    if get_config().backend == HOST:
        raise InvalidArgumentError("an XLA-compiled step on a GPU hands blinkflow GPU buffers, but "
                                   "BLINKFLOW_BACKEND=cpu; set BLINKFLOW_BACKEND=auto, or compile the step without XLA "
                                   "(model.compile(jit_compile=False), tf.function(jit_compile=False))")
    return DEVICE
