"""Launching blinkflow's kernels on device pointers and cupy arrays (on the current stream).

The executor works on raw addresses (a peer's receive slot is an IPC-mapped address, not a
cupy array), so the pointer-level functions are the primitive; the array-level ones check
shapes and dtypes and are what tests and the fusion-buffer code use.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ...errors import BackendError
from ...ops import ReduceOp
from ...scaling import kernel_factor
from . import kernels
from .device import multiprocessor_count

THREADS = 512
"""Threads per block of the reduce, scale and pack kernels: with ``BF_UNROLL`` 16-byte loads in
flight per thread (``kernels/common.cuh``), 32 KiB per block (docs/cuda.md, "Keeping a link busy")."""
BLOCKS_PER_SM = 4
"""Grid cap per SM: 4 x 512 threads fill an SM's 2048; larger buffers loop (grid-stride)."""


def dtype_name(dtype) -> str:
    """The kernels' dtype key. ``bfloat16`` arrives as that name (ml_dtypes/TF) or is passed
    explicitly when bfloat16 data travels in a ``uint16`` cupy array (CuPy has no bfloat16)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    return name


def _grid(nelems: int, itemsize: int) -> int:
    import cupy

    per_thread = max(1, 16 // itemsize)  # one 16-byte vector per thread per iteration
    work = -(-nelems // per_thread)
    limit = multiprocessor_count(cupy.cuda.runtime.getDevice()) * BLOCKS_PER_SM
    return max(1, min(limit, -(-work // THREADS)))


def reduce_ptrs(dtype: str, op: ReduceOp, out: int, inputs: Sequence[int], nelems: int, itemsize: int,
                out2: int = 0) -> None:
    """``out[i] = op(inputs[0][i], inputs[1][i], ...)`` (and ``out2[i]`` too, when non-zero)."""
    if not 1 <= len(inputs) <= kernels.MAX_INPUTS:
        raise BackendError(f"a fused reduction takes 1..{kernels.MAX_INPUTS} inputs, got {len(inputs)}")
    if nelems <= 0:
        return
    kernel = kernels.get_kernel("reduce.cu", kernels.reduce_name(dtype, op))
    ptrs = [np.uint64(p) for p in inputs] + [np.uint64(0)] * (kernels.MAX_INPUTS - len(inputs))
    kernel((_grid(nelems, itemsize),), (THREADS,),
           (np.uint64(out), np.uint64(out2), *ptrs, np.int32(len(inputs)), np.int64(nelems)))


def reduce(out, inputs: Sequence, op: ReduceOp, out2=None, dtype: Optional[str] = None) -> None:
    """Array form of :func:`reduce_ptrs`: every array 1-D contiguous, same size and dtype."""
    name = dtype or dtype_name(out.dtype)
    arrays = [out, *inputs] + ([out2] if out2 is not None else [])
    for a in arrays:
        if a.dtype != out.dtype or a.size != out.size or not a.flags.c_contiguous:
            raise BackendError("reduce needs contiguous arrays of one dtype and size")
    reduce_ptrs(name, op, out.data.ptr, [a.data.ptr for a in inputs], out.size, out.dtype.itemsize,
                out2.data.ptr if out2 is not None else 0)


def scale(buf, factor: float, out=None, dtype: Optional[str] = None) -> None:
    """``out = buf * factor`` (in place when ``out`` is None)."""
    out = buf if out is None else out
    if out.size != buf.size or out.dtype != buf.dtype:
        raise BackendError("scale needs arrays of one size and dtype")
    if buf.size == 0:
        return
    name = dtype or dtype_name(buf.dtype)
    kernel = kernels.get_kernel("scale.cu", kernels.scale_name(name))
    kernel((_grid(buf.size, buf.dtype.itemsize),), (THREADS,),
           (out, buf, np.float64(kernel_factor(name, factor)), np.int64(buf.size)))


def _tables(arrays: Sequence, dst_size: int):
    import cupy

    sizes = [int(a.size) for a in arrays]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] > dst_size:
        raise BackendError(f"tensors hold {offsets[-1]} elements; the fusion buffer only {dst_size}")
    ptrs = cupy.asarray(np.array([a.data.ptr for a in arrays], dtype=np.uint64))
    return ptrs, cupy.asarray(offsets)


def _launch_copy(kind: str, flat, arrays: Sequence) -> None:
    for a in arrays:
        if a.dtype.itemsize != flat.dtype.itemsize or not a.flags.c_contiguous:
            raise BackendError(f"{kind}: tensors must be contiguous with the buffer's element size")
    if not arrays:
        return
    ptrs, offsets = _tables(arrays, flat.size)
    kernel = kernels.get_kernel("pack.cu", kernels.pack_name(kind, flat.dtype.itemsize))
    largest = max(int(a.size) for a in arrays)
    grid = (_grid(max(1, largest), flat.dtype.itemsize), min(len(arrays), 65535))
    kernel(grid, (THREADS,), (flat, ptrs, offsets, np.int32(len(arrays))))


def pack(dst, srcs: Sequence) -> None:
    """Copy ``srcs`` back to back into the flat fusion buffer ``dst`` in one launch."""
    _launch_copy("pack", dst, srcs)


def unpack(src, dsts: Sequence) -> None:
    """Copy consecutive pieces of the flat buffer ``src`` into ``dsts`` in one launch."""
    _launch_copy("unpack", src, dsts)
