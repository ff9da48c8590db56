"""Executors of collectives: ``cpu`` (numpy + MPI, shared memory on a host) and ``cuda`` (CuPy
RawModule kernels, CUDA IPC). Both implement :class:`blinkflow.backends.base.Backend`; CuPy is
imported only by the cuda backend, lazily."""
from .base import Backend, BackendContext

__all__ = ["Backend", "BackendContext"]
