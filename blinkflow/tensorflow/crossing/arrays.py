"""Tensors to the runtime's arrays and back, by where their memory lives
(:func:`blinkflow.placement.of_tensors`):

* **device**: GPU tensors become CuPy views by DLPack, without a copy
  (:mod:`blinkflow.backends.cuda.dlpack`), placed on the GPU the cuda backend drives for this rank
  (a tensor TensorFlow keeps on the host is first placed there by TensorFlow); the results come
  back the same way, after one device synchronization. bfloat16, which CuPy lacks, is reduced in
  float32 on the device.
* **host**: CPU tensors become numpy arrays (``.numpy()``, a view where TensorFlow allows) for
  the cpu backend; results come back by conversion.

``conversions`` counts the tensors of collectives each route carried (``"host"``, ``"device"``;
a wait's handles are not counted, they never move): a GPU tensor
that went through the host would show here (the tests assert it does not). It ships because the
tests must see the route the production code takes, not a copy of it; a counter add per call is
its whole cost.
"""
from __future__ import annotations

import collections
from typing import List, Sequence

import numpy as np
import tensorflow as tf

from ... import placement
from ...errors import BackendError, BlinkflowError

conversions: "collections.Counter[str]" = collections.Counter()
#: TensorFlow refuses tensor memory not aligned to this (EIGEN_MAX_ALIGN_BYTES); CuPy allocates at 256.
_TF_ALIGN = 64
_route_cache = {}


def of_tensors(tensors: Sequence[tf.Tensor]) -> list:
    """The tensors' arrays for the runtime: cupy views by DLPack on the device route, numpy
    (views where TensorFlow allows) on the host route."""
    tensors = list(tensors)
    if placement.of_tensors(tensors) == placement.DEVICE:
        return _device_arrays(tensors)
    conversions["host"] += len(tensors)
    return [t.numpy() for t in tensors]


def of_host(arrays: Sequence[np.ndarray]) -> list:
    """Numpy arrays TensorFlow already handed over (a ``tf.numpy_function``'s), counted."""
    conversions["host"] += len(arrays)
    return list(arrays)


def handles(values) -> List[int]:
    """Runtime handles (int64 scalars, as tensors or numpy values) as ints: they never move."""
    return [int(v) for v in values]


def host_results(outs, out_dtypes: Sequence[tf.DType]) -> list:
    """The runtime's results as numpy arrays of ``out_dtypes`` (a ``tf.numpy_function``'s outputs)."""
    return [np.asarray(o, dtype=d.as_numpy_dtype) for o, d in zip(outs, out_dtypes)]


def to_tensors(outs, out_dtypes: Sequence[tf.DType]) -> List[tf.Tensor]:
    """Tensors of ``out_dtypes`` from the runtime's results: cupy arrays by DLPack, numpy
    arrays (host results, alltoall's received splits) by conversion."""
    if not any(_is_cupy(o) for o in outs):
        return [tf.convert_to_tensor(o) for o in host_results(outs, out_dtypes)]
    # aligned: a slice of a fused result may not be, and TensorFlow takes only aligned memory
    with _rank_device_scope():  # a copy runs on the thread's device: make it the results'
        aligned = [o.copy() if _is_cupy(o) and o.size and o.data.ptr % _TF_ALIGN else o for o in outs]
    # One device sync before TensorFlow sees anything, also when every output is empty: our
    # kernels ran on our streams and still read the inputs (TF may reuse their memory once this
    # returns) and write the outputs (TF reads them on its own streams).
    _synchronize()
    return [_to_tf(o, d) if _is_cupy(o) else tf.convert_to_tensor(np.asarray(o, dtype=d.as_numpy_dtype))
            for o, d in zip(aligned, out_dtypes)]


def widened(tensors: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType]):
    """``(tensors, out_dtypes)`` with bfloat16 as float32 where the device route is possible (CuPy
    has no bfloat16), for a crossing that cannot cast per call (XLA's custom call)."""
    widen = placement.tensors_may_go_to_device()
    tensors = [tf.cast(t, tf.float32) if widen and t.dtype == tf.bfloat16 else t for t in tensors]
    return tensors, [tf.float32 if widen and tf.as_dtype(d) == tf.bfloat16 else tf.as_dtype(d) for d in out_dtypes]


def _rank_device() -> int:
    """The CUDA ordinal the cuda backend drives for this rank (asked once per job)."""
    from ...runtime.global_state import RUNTIME

    layout = RUNTIME.running("a collective on GPU tensors").job.layout
    known = _route_cache.get("device")
    if known is None or known[0] is not layout:
        from ...backends.cuda.device import rank_device

        known = _route_cache["device"] = (layout, rank_device(layout))
    return known[1]


def _device_arrays(tensors) -> list:
    from ...backends.cuda.dlpack import tf_label, tf_to_cupy

    arrays = []
    if "tf_gpus" not in _route_cache:
        _route_cache["tf_gpus"] = bool(tf.config.get_visible_devices("GPU"))
    # Where TensorFlow has no GPU (a CPU build, or the CPU suite's fake CuPy playing one) there is
    # nothing to place on: the tensors cross as they are.
    where = f"/GPU:{tf_label(_rank_device())}" if _route_cache["tf_gpus"] else None
    try:
        with tf.device(where):
            # bfloat16, which CuPy lacks, is reduced in float32 (and cast back in to_tensors)
            placed = [tf.cast(t, tf.float32) if t.dtype == tf.bfloat16 else (t if placement.on_gpu(t) else tf.identity(t))
                      for t in tensors]
        for i, t in enumerate(placed):
            arrays.append(tf_to_cupy(t, sync=i == len(placed) - 1))  # one device sync for the group
    except BlinkflowError:
        raise
    except Exception as e:  # CuPy refusing a capsule: say what to do rather than a DLPack trace
        raise BackendError(f"cannot hand TensorFlow's tensors to the cuda backend ({e}); place them on a GPU "
                           "or set BLINKFLOW_BACKEND=cpu") from None
    conversions["device"] += len(tensors)
    return arrays


def _rank_device_scope():
    """The rank's GPU as the calling thread's current device, for a ``with`` block."""
    import cupy

    return cupy.cuda.Device(_rank_device())


def _synchronize() -> None:
    import cupy

    from ...backends.cuda.dlpack import synchronize

    synchronize(cupy, _rank_device())  # the GPU our work ran on, not this thread's


def _to_tf(array, dtype: tf.DType):
    from ...backends.cuda.dlpack import cupy_to_tf

    wide = dtype == tf.bfloat16
    tensor = cupy_to_tf(array, sync=False) if array.size else tf.zeros(array.shape, tf.float32 if wide else dtype)
    return tf.cast(tensor, tf.bfloat16) if wide else tensor


def _is_cupy(array) -> bool:
    """Whether a runtime result lives in GPU memory (the runtime's GPU results are CuPy arrays)."""
    from ...arrays import on_device

    return on_device(array)
