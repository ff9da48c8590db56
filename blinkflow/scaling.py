"""Horovod's pre/post-scale factors and arithmetic, the one definition every backend and binding uses.

A collective's ``prescale_factor``, ``postscale_factor`` and Average's division by the number of
ranks multiply a buffer by a factor. Horovod 0.28's CPU operations do it in
``HorovodOp::ScaleBuffer`` (``horovod/common/ops/collective_operations.cc``, with
``ScaleBufferCPUImpl`` in ``collective_operations.h``): the prescale on each rank's input before
the reduction, then the postscale on the reduced sum, where Average is a Sum whose postscale
was divided by the size first, in float64 (``postscale_factor /= size`` in
``mpi_operations.cc`` and ``gloo_operations.cc``). ScaleBuffer multiplies

- integers in float64 (``double * int``), converted back by truncation toward zero;
- float16 in float32: the factor cast to float, the product rounded once to float16;
- float32 in float32: the factor cast to float (``(float)scale_factor``), so a float32 Average
  at 3 ranks is ``sum * float32(1/3)``, not ``sum / 3``;
- float64 in float64.

blinkflow does the same, bit for bit, with three choices of its own:

- an Average of integers without a postscale divides exactly (integer division truncated
  toward zero, no float64 rounding of large int64), where Horovod's ``49 * (1/49)`` is
  ``0.999...`` and truncates one too low; the two agree at 2 and 3 ranks for sums below 2**53;
- factors keep float64 precision, where Horovod's TensorFlow op carries them as float32
  attributes (``horovod/tensorflow/mpi_ops.cc``) and so rounds them before the core sees them;
- bfloat16 and bool, which ScaleBuffer refuses: bfloat16 multiplies by the factor rounded to
  bfloat16, bool in float64 (nonzero is true).

Which factors a call has, and where each applies, is decided here too:

- :func:`predivided`: ``gradient_predivide_factor`` f of an Average (the optimizers' and the
  tape's) is a Sum prescaled by 1/f and postscaled by f/size, as Horovod's
  ``DistributedOptimizer`` does;
- :func:`folded_factor`: the factor an all-reduce's algorithm folds into its last write (a float's
  postscale, Average's 1/size included; every backend's algorithm takes it, and the prescale,
  as arguments);
- :func:`finish`: what follows on the reduced result where nothing was folded (an integer's or a
  bool's Average or postscale).

The forms, held to each other by ``tests/unit/test_scaling.py``:

- arrays (numpy, and CuPy for dtypes its kernel lacks): :func:`scale`, :func:`scaled_copy`,
  :func:`average`;
- TensorFlow tensors (TensorFlow imported on first use): :func:`tf_scaled`, :func:`tf_averaged`;
- the CUDA kernel (``kernels/scale.cu``), which multiplies in the precision above by the factor
  the host hands it: :func:`kernel_factor`.
"""
from __future__ import annotations

from typing import Callable, Tuple

import numpy as np

from .ops import ReduceOp


def scale(buf, factor: float) -> None:
    """``buf *= factor`` in place, with Horovod's arithmetic."""
    if factor != 1.0:
        scaled_copy(buf, buf, factor)


def scaled_copy(src, dst, factor: float) -> None:
    """``dst = src * factor`` in one pass (a plain copy when ``factor`` is 1), with Horovod's
    arithmetic; ``dst`` may be ``src``."""
    if factor == 1.0:
        if dst is not src:
            np.copyto(dst, src)
    elif dst.dtype.kind in "iub":
        dst[...] = (src * factor).astype(dst.dtype)  # a Python float makes the product float64
    elif dst.dtype == np.float16 and isinstance(dst, np.ndarray):
        np.multiply(src, np.float32(factor), out=dst, dtype=np.float32)
    else:
        np.multiply(src, dst.dtype.type(factor), out=dst)


def average(buf, size: int, postscale: float = 1.0, scale: Callable[[object, float], None] = scale) -> None:
    """Divide a summed ``buf`` by ``size`` ranks and multiply by ``postscale``, in place.

    As Horovod, ``buf`` is multiplied by one factor, ``postscale / size`` computed first in
    float64, through ``scale`` (a backend passes its own, a kernel on the GPU); integers without
    a postscale are instead divided exactly, truncated toward zero.
    """
    if buf.dtype.kind not in "iu" or postscale != 1.0:
        scale(buf, postscale / size)
        return
    # In 64 bits: ``int8 // 200`` would not even accept the size. Floor division, then
    # truncation toward zero where a negative sum leaves a remainder.
    wide = buf.astype("uint64" if buf.dtype.kind == "u" else "int64", copy=False)
    quotient = wide // size
    if buf.dtype.kind == "i":
        quotient += ((wide - quotient * size) != 0) & (wide < 0)
    buf[...] = quotient


def predivided(op: ReduceOp, size: int, predivide_factor: float) -> Tuple[ReduceOp, float, float]:
    """(op, prescale, postscale) the runtime applies for gradients reduced by ``op`` over
    ``size`` ranks with ``gradient_predivide_factor`` f: ``op`` unscaled when f is 1; else (an
    Average) a Sum prescaled by 1/f and postscaled by f/size."""
    if predivide_factor == 1.0:
        return op, 1.0, 1.0
    return ReduceOp.SUM, 1.0 / predivide_factor, predivide_factor / size


def folded_factor(is_average: bool, postscale: float, size: int, dtype: np.dtype) -> float:
    """The factor an all-reduce's algorithm multiplies into its last write: a float's (or
    complex's) whole postscale, divided by ``size`` for an Average; 1 for other dtypes, whose
    scaling :func:`finish` applies afterwards with Horovod's arithmetic."""
    if not _folds(dtype):
        return 1.0
    return postscale / size if is_average else postscale


def _folds(dtype: np.dtype) -> bool:
    """Whether an algorithm folds a result's scaling into its last write (floats and complex)."""
    return dtype.kind in "fc"


def finish(buf, is_average: bool, postscale: float, size: int, scale: Callable[[object, float], None] = scale) -> None:
    """The scaling left, in place, after an all-reduce whose algorithm folded
    :func:`folded_factor`: none for floats; an integer's or bool's :func:`average`, or postscale,
    through ``scale`` (a backend passes its own)."""
    if _folds(buf.dtype):
        return
    if is_average:
        average(buf, size, postscale, scale)
    elif postscale != 1.0:
        scale(buf, postscale)


def tf_scaled(tensor, factor: float):
    """``tensor * factor`` for a ``tf.Tensor``, with Horovod's arithmetic."""
    if factor == 1.0:
        return tensor
    import tensorflow as tf

    dtype = tensor.dtype
    if dtype.is_integer or dtype == tf.bool:
        return tf.cast(tf.cast(tensor, tf.float64) * factor, dtype)
    if dtype == tf.float16:
        return tf.cast(tf.cast(tensor, tf.float32) * np.float32(factor), dtype)
    if dtype == tf.bfloat16:  # the kernel's factor: rounded to float32, then to bfloat16
        return tensor * tf.cast(np.float32(factor), dtype)
    return tensor * tf.constant(factor, dtype)  # tf.cast(factor, ...) would round it to float32 first


def tf_averaged(summed, size: int, postscale: float = 1.0):
    """:func:`average` of a ``tf.Tensor``: ``summed`` over ``size`` ranks, times ``postscale``."""
    import tensorflow as tf

    if summed.dtype.is_floating or summed.dtype == tf.bool or postscale != 1.0:
        return tf_scaled(summed, postscale / size)
    # In 64 bits, as the array form: ``int8`` cannot even hold 200 ranks.
    wide = tf.uint64 if summed.dtype.is_unsigned else tf.int64
    return tf.cast(tf.truncatediv(tf.cast(summed, wide), tf.constant(size, wide)), summed.dtype)


def kernel_factor(dtype: str, factor: float) -> float:
    """The factor the host hands the scale kernel for a buffer of ``dtype`` (a name), so that
    the kernel's product is :func:`scale`'s: float32 and float16 buffers multiply by the factor
    rounded to float32 (float16 is computed in float32), bfloat16 by the factor rounded to
    bfloat16 (round to nearest even), every other dtype by the factor as it is (float64; the
    kernel truncates integer products toward zero)."""
    if dtype in ("float16", "float32"):
        return float(np.float32(factor))
    if dtype == "bfloat16":
        bits = np.array([factor], dtype=np.float32).view(np.uint32)
        bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        return float(bits.view(np.float32)[0])
    return float(factor)
