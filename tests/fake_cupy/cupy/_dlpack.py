"""Reading and relabelling the device of a DLPack capsule (a ``DLManagedTensor`` in a PyCapsule).

The fake's device memory is host memory, so the capsules it makes and takes differ from numpy's
only in their ``DLDevice``: ``(kDLCUDA, ordinal)`` where numpy writes ``(kDLCPU, 0)``.
"""
import ctypes

KDL_CPU, KDL_CUDA = 1, 2

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

# (capsule name, offset of DLTensor in the managed struct): the legacy DLManagedTensor starts
# with it; the versioned one has a version (8 bytes), manager_ctx, deleter and flags first.
_LAYOUTS = ((b"dltensor", 0), (b"dltensor_versioned", 32))


def _tensor(capsule) -> int:
    for name, offset in _LAYOUTS:
        if _is_valid(capsule, name):
            return _get_pointer(capsule, name) + offset
    raise TypeError("not an unconsumed DLPack capsule")


def data_pointer(capsule) -> int:
    return ctypes.c_void_p.from_address(_tensor(capsule)).value or 0


def device(capsule):
    """``(device_type, device_id)`` of the capsule's tensor."""
    at = _tensor(capsule) + 8  # DLTensor: void* data, then DLDevice {int32 type; int32 id}
    return ctypes.c_int32.from_address(at).value, ctypes.c_int32.from_address(at + 4).value


def relabel(capsule, device_type: int, device_id: int):
    at = _tensor(capsule) + 8
    ctypes.c_int32.from_address(at).value = device_type
    ctypes.c_int32.from_address(at + 4).value = device_id
    return capsule
