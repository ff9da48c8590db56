"""Host memory by raw address: a numpy view of bytes a pointer reaches, and an array's address.

The device executor, its loopback and its network proxy read counters, abort flags and receive
slots that live in pinned or IPC-mapped host memory, known to them only as integer addresses;
the numpy emulator of the interpreter kernel (:mod:`.device_emulator`) reads the same memory the
same way.
"""
from __future__ import annotations

import ctypes

import numpy as np


def view(address: int, count: int, dtype) -> np.ndarray:
    """``count`` elements of ``dtype`` at ``address`` (memory this process can reach)."""
    dtype = np.dtype(dtype)
    nbytes = max(1, count) * dtype.itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(int(address)), dtype=dtype)[:count]


def address(array: np.ndarray) -> int:
    """The address of ``array``'s first element."""
    return array.__array_interface__["data"][0]
