"""Finding the GPU a rank drives, and what this machine's CUDA and MPI can do.

Kept apart from the executor so ``is_available`` can be asked without building a backend
(``BLINKFLOW_BACKEND=auto`` picks cuda only when it answers True). Everything imports CuPy
lazily and answers False, never raises, when CuPy or a GPU is missing.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import os
from typing import Optional

from ...errors import BackendError


def is_available() -> bool:
    """CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError (no driver), ...
        return False


def require_cupy():
    """Import CuPy or raise a BackendError that says how to get it."""
    try:
        import cupy
    except ImportError as e:
        raise BackendError("the cuda backend needs CuPy: pip install 'blinkflow[gpu]' (cupy-cuda12x), "
                           "or set BLINKFLOW_BACKEND=cpu") from e
    if not is_available():
        raise BackendError("the cuda backend found no CUDA device; set BLINKFLOW_BACKEND=cpu")
    return cupy


def choose_device(local_rank: int, device_count: int) -> int:
    """The CUDA ordinal a rank drives: local rank k drives CUDA device k of those its process
    sees, as discovery assumed when it named the rank's GPU by PCI bus id
    (:mod:`blinkflow.topology.visible_devices`), and as Horovod's
    ``set_visible_devices(gpus[local_rank])`` does. Ranks beyond the devices (a given topology
    with virtual ids, e.g. 2-4 ranks sharing one GPU in tests) go round-robin; discovery refuses
    that case before a backend is built."""
    if device_count <= 0:
        raise BackendError("no CUDA device")
    return local_rank % device_count


_kept_ordinal: Optional[int] = None
"""The CUDA ordinal this process keeps through an elastic reset (see :func:`keep_ordinal`)."""


def keep_ordinal(ordinal: Optional[int]) -> None:
    """Drive CUDA device ``ordinal`` whatever the local rank: a process whose job re-formed
    around it keeps the GPU its context and tensors are on, though its local rank changed."""
    global _kept_ordinal
    _kept_ordinal = ordinal


def rank_device(layout) -> int:
    """The CUDA ordinal this rank drives (the cuda backend's, and the TF crossing's for TF tensors)."""
    import cupy

    if _kept_ordinal is not None:
        return _kept_ordinal
    return choose_device(layout.local_rank, cupy.cuda.runtime.getDeviceCount())


def use_rank_device(layout) -> int:
    """Make the rank's GPU the calling thread's current CUDA device and return its ordinal (init()
    calls it where :func:`blinkflow.placement.cuda_usable` says yes): the arrays a user makes
    after ``init()`` then land on the GPU the rank's collectives run on, as Horovod's
    ``torch.cuda.set_device(local_rank)`` recipe arranges by hand. CUDA's current device belongs
    to a thread, so only the thread that called ``init()`` is moved."""
    import cupy

    device = rank_device(layout)
    cupy.cuda.Device(device).use()
    return device


@functools.lru_cache(maxsize=None)
def multiprocessor_count(device: int) -> int:
    import cupy

    return int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


@functools.lru_cache(maxsize=None)
def cuda_aware_mpi() -> bool:
    """Whether MPI accepts device pointers, asked of the MPI library itself, never guessed.

    mpi4py has no wrapper for ``MPIX_Query_cuda_support`` (Open MPI's and MPICH's extension),
    so it is looked up in the libmpi mpi4py already loaded (``RTLD_NOLOAD``: never a second
    copy). Any failure, or an MPI without the extension, answers False: staging is always safe.
    """
    try:
        importlib.import_module("mpi4py.MPI")  # loads libmpi
    except Exception:  # ImportError, or mpi4py failing to find libmpi outside mpirun
        return False
    for name in ("libmpi.so.40", "libmpi.so.12", "libmpi.so"):
        try:
            lib = ctypes.CDLL(name, mode=getattr(os, "RTLD_NOLOAD", 4) | ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        query = getattr(lib, "MPIX_Query_cuda_support", None)
        if query is None:
            return False
        query.restype = ctypes.c_int
        try:
            return query() == 1
        except Exception:
            return False
    return False


def nccl_available() -> bool:
    try:
        from cupy.cuda import nccl

        return bool(nccl.available) if hasattr(nccl, "available") else True
    except Exception:
        return False


def gpus_distinct(comm, device: int) -> bool:
    """Whether every rank of ``comm`` drives a different physical GPU (host name + PCI bus id):
    NCCL refuses ranks that share one (the GPU benchmark asks before comparing with it)."""
    import socket

    import cupy

    key = (socket.gethostname(), cupy.cuda.runtime.deviceGetPCIBusId(device))
    keys = comm.allgather(key)
    return len(set(keys)) == len(keys)
