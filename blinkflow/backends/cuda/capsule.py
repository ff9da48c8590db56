"""The device a DLPack capsule names, read and rewritten in place.

TensorFlow labels the capsules of its GPU tensors with its *logical* device id (the k of
``GPU:k``), which is the CUDA ordinal only while TensorFlow sees every GPU the process sees: after
Horovod's ``tf.config.set_visible_devices(gpus[local_rank])`` rank k's tensors arrive labelled 0
while living on GPU k, and CuPy trusts the label. So the TF crossing rewrites the label to the
memory's real device before CuPy reads it, and back to TensorFlow's id on the way out.

A capsule holds a ``DLManagedTensor`` (legacy name ``dltensor``) or a
``DLManagedTensorVersioned`` (``dltensor_versioned``, whose ``DLTensor`` follows a version, the
manager context, the deleter and flags: 32 bytes); ``DLTensor`` starts with the data pointer and
then ``DLDevice {int32 device_type; int32 device_id}``.
"""
from __future__ import annotations

import ctypes
from typing import Tuple

KDL_CUDA = 2

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_LAYOUTS = ((b"dltensor", 0), (b"dltensor_versioned", 32))


def _tensor(capsule) -> int:
    for name, offset in _LAYOUTS:
        if _is_valid(capsule, name):
            return _get_pointer(capsule, name) + offset
    raise TypeError("not an unconsumed DLPack capsule")


def data_pointer(capsule) -> int:
    return ctypes.c_void_p.from_address(_tensor(capsule)).value or 0


def device(capsule) -> Tuple[int, int]:
    """``(device_type, device_id)``."""
    at = _tensor(capsule) + 8
    return ctypes.c_int32.from_address(at).value, ctypes.c_int32.from_address(at + 4).value


def set_device_id(capsule, device_id: int):
    """The capsule, its device id rewritten (the memory is not touched)."""
    ctypes.c_int32.from_address(_tensor(capsule) + 12).value = device_id
    return capsule
