"""The CUDA backend: Blink's spanning-tree collectives on GPUs, driven through CuPy.

Blink (Wang et al., MLSys 2020) packs spanning trees over NVLink and pipelines chunks down
them with fused reduce-and-forward kernels. Here each rank drives one GPU; ranks on a host
share receive slots through CUDA IPC and order each other's work with IPC events, and the
schedule IR lowered from the plan (``blinkflow.schedule.ir``) says what moves where.

Modules, one job each:

``kernels``    loads ``kernels/*.cu`` through ``cupy.RawModule`` (lazily, per device)
``launch``     launches reduce / scale / pack kernels on pointers and cupy arrays
``program``    pure: compiles one rank's schedule into ordered actions (no CuPy)
``pipeline``   pure: the per-rank issue loop and the READY/FREE slot protocol (no CuPy)
``schedules``  pure: one-hop and chain schedules built without the planner
``ipc``        receive slots and events shared through CUDA IPC (or pinned host memory)
``peers``      whether a local peer's memory can be mapped or must be staged
``issuer``     enqueues actions on one stream per tree
``messenger``  READY/FREE control messages over MPI
``crosshost``  the cross-machine phase (NCCL, CUDA-aware MPI, or pinned host staging)
``device``     which GPU a rank drives; what CUDA and MPI can do here
``backend``    :class:`CudaBackend`, the :class:`~blinkflow.backends.base.Backend`
``dlpack``     zero-copy TensorFlow <-> CuPy
``capsule``    a DLPack capsule's device id, read and rewritten

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
