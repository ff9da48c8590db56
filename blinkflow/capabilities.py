"""Horovod's build and capability queries (``hvd.mpi_built()``, ``hvd.nccl_built()``, ...).

Horovod answers what its C++ extension was compiled with; blinkflow has no compiled extension,
so each answers what this installation can use, without initialising MPI or a GPU:

* MPI carries every control message and the data between hosts: ``mpi_built`` and
  ``mpi_enabled`` are true when mpi4py is installed (blinkflow's one transport);
* Gloo, NCCL, DDL, oneCCL, ROCm and SYCL are not used (``nccl_built()`` is 0, Horovod's "no NCCL
  version"); blinkflow's own schedules replace NCCL's rings;
* ``cuda_built`` is true when the cuda backend can load (CuPy is installed).

``blinkrun --check-build`` prints the same facts with versions.
"""
from __future__ import annotations

import importlib.util


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def mpi_built() -> bool:
    """True: blinkflow runs on MPI (mpi4py) whenever it runs at all."""
    return _installed("mpi4py")


def mpi_enabled() -> bool:
    """True when MPI is the controller and transport (always, where it is installed)."""
    return _installed("mpi4py")


def gloo_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return False


def nccl_built() -> int:
    """0: blinkflow does not use NCCL (Horovod returns NCCL's version code, or 0)."""
    return 0


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def rocm_built() -> bool:
    return False


def sycl_built() -> bool:
    return False


def cuda_built() -> bool:
    """Whether the cuda backend can load here (CuPy is installed)."""
    return _installed("cupy")
