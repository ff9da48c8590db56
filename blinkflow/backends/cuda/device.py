"""Finding the GPU a rank drives, and what this machine's CUDA and MPI can do.

Kept apart from the executor so ``is_available`` can be asked without building a backend
(``BLINKFLOW_BACKEND=auto`` picks cuda only when it answers True). Everything imports CuPy
lazily and answers False, never raises, when CuPy or a GPU is missing.
"""
from __future__ import annotations

import functools
from typing import Sequence

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


def choose_device(local_rank: int, local_devices: Sequence[int], device_count: int) -> int:
    """The CUDA ordinal a rank drives.

    When the topology ids of the host's ranks are distinct CUDA ordinals (the usual case: one
    rank per GPU, ids as ``nvidia-smi`` shows them) each rank takes its own id. Otherwise (more
    ranks than GPUs, e.g. tests with 2-4 ranks sharing one GPU, or CUDA_VISIBLE_DEVICES
    renumbering) ranks go round-robin by local rank.
    """
    if device_count <= 0:
        raise BackendError("no CUDA device")
    ids = list(local_devices)
    if len(set(ids)) == len(ids) and all(0 <= d < device_count for d in ids):
        return ids[local_rank]
    return local_rank % device_count


@functools.lru_cache(maxsize=None)
def multiprocessor_count(device: int) -> int:
    import cupy

    return int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


def cuda_aware_mpi() -> bool:
    """Whether MPI accepts device pointers (Open MPI built with CUDA, MPICH/MVAPICH with GPU
    support). Asked through the MPI library itself where it can tell, never guessed."""
    try:
        from mpi4py import MPI
    except ImportError:
        return False
    query = getattr(MPI, "Query_cuda_support", None)  # mpi4py >= 4 on MPIs that export MPIX_Query_cuda_support
    if query is not None:
        try:
            return bool(query())
        except Exception:
            return False
    return False


def nccl_available() -> bool:
    try:
        from cupy.cuda import nccl

        return bool(nccl.available) if hasattr(nccl, "available") else True
    except Exception:
        return False
