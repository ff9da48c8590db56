"""What an argument is, recognised by the protocols it speaks, as mpi4py recognises buffers, not by
the module its type is defined in (a subclass, a wrapper or another library's array is then
recognised too):

- an array in GPU memory exposes ``__cuda_array_interface__`` (CuPy, Numba, PyTorch's CUDA
  tensors), or DLPack reports a CUDA device for it (``__dlpack_device__``);
- an array exposes one of the array interfaces, ``__array_interface__`` (numpy and what is
  built on it) or ``__cuda_array_interface__``.

A framework's tensor (``tf.Tensor``) speaks DLPack and the buffer protocol, but exposes neither
array interface: it is not an array here, and goes to its framework's binding.
"""
from __future__ import annotations

KDL_CUDA = 2
KDL_CUDA_MANAGED = 13
"""DLPack device types of CUDA memory (``DLDeviceType``)."""


def on_device(value) -> bool:
    """Whether ``value`` lives in GPU memory."""
    if hasattr(value, "__cuda_array_interface__"):  # a CPU tensor's property raises: False
        return True
    dlpack_device = getattr(value, "__dlpack_device__", None)
    return dlpack_device is not None and dlpack_device()[0] in (KDL_CUDA, KDL_CUDA_MANAGED)


def is_array(value) -> bool:
    """Whether ``value`` is an array (host or GPU), not a framework's tensor."""
    return hasattr(value, "__array_interface__") or hasattr(value, "__cuda_array_interface__")


def as_cupy(value):
    """A GPU array as a CuPy array, without a copy: CuPy's own as they are, others through
    ``__cuda_array_interface__`` or DLPack."""
    import cupy

    if isinstance(value, cupy.ndarray):
        return value
    if hasattr(value, "__cuda_array_interface__"):
        return cupy.asarray(value)
    return cupy.from_dlpack(value)
