"""The CUDA backend: Blink's spanning-tree collectives on GPUs, driven through CuPy.

Blink (Wang et al., MLSys 2020) packs spanning trees over NVLink and pipelines chunks down
them with fused reduce-and-forward kernels. Here each rank drives one GPU; ranks on a host
share receive slots through CUDA IPC and order each other's work with IPC events, and the
schedule IR lowered from the plan (``blinkflow.schedule.ir``) says what moves where.

Modules, one job each:

``backend``          ``CudaBackend``, the ``Backend``: tree collectives, one rank per GPU
``device``           which GPU a rank drives; what CUDA and MPI can do here
``kernels``          loads ``kernels/*.cu`` through ``cupy.RawModule`` (lazily, per device)
``launch``           launches reduce / scale / pack kernels on pointers and cupy arrays
``transport``        the runner's ``Transport``: actions on CUDA streams, IPC copies, MPI between hosts
``ipc``              receive slots and handshake events shared through CUDA IPC
``peers``            whether a local peer's memory can be mapped or must be staged
``device_executor``  the device executor: one interpreter-kernel launch runs a rank's whole call
``proxy``            the device executor's host thread: network edges' chunks and launch deadlines
``nccl``             NCCL's all-reduce as one algorithm of the call-shape policy
``dlpack``           zero-copy TensorFlow <-> CuPy
``capsule``          a DLPack capsule's device id, read and rewritten

Importing this package does not import CuPy; ``CudaBackend`` is resolved on first use.
"""
from __future__ import annotations


def __getattr__(name):
    if name == "CudaBackend":
        from .backend import CudaBackend

        return CudaBackend
    if name == "is_available":
        from .device import is_available

        return is_available
    raise AttributeError(f"module 'blinkflow.backends.cuda' has no attribute {name!r}")


__all__ = ["CudaBackend", "is_available"]
