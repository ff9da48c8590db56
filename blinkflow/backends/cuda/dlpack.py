"""TensorFlow GPU tensors <-> cupy arrays through DLPack, without copying.

The TF bindings (``blinkflow.tensorflow._bridge``) call these so a ``tf.Tensor`` on a GPU reaches
the cuda backend as a cupy view of the same memory (DESIGN §1: gradients go from the optimizer
into the fusion buffer without a host round trip), and results go back the same way. CuPy
refuses a capsule of host memory; the bridge places tensors on the GPU first.

CuPy has no bfloat16 dtype: a bfloat16 tensor is bit-cast to uint16 first (``tf.bitcast``
reinterprets, it does not convert) and the dtype name travels beside the array, so the
kernels still reduce it as bfloat16 (``CudaBackend.allreduce(buf, op, dtype="bfloat16")``).

Ordering: the legacy DLPack capsule TF produces carries no stream, and TF computes on its own
streams. With ``sync=True`` (the default) the device is synchronised before the array is
handed on, which orders TF's pending work before ours. Callers that already synchronised
(e.g. a whole fused batch at once) pass ``sync=False``.
"""
from __future__ import annotations

from typing import Optional, Tuple


def tf_to_cupy(tensor, sync: bool = True) -> Tuple[object, str]:
    """``(cupy_array, dtype_name)`` viewing ``tensor``'s GPU memory; the name is "bfloat16"
    for bfloat16 tensors (whose array is their uint16 bit pattern)."""
    import cupy
    import tensorflow as tf

    name = tensor.dtype.name
    if name == "bfloat16":
        tensor = tf.bitcast(tensor, tf.uint16)
    capsule = tf.experimental.dlpack.to_dlpack(tensor)
    array = _from_capsule(cupy, capsule)
    if sync:
        cupy.cuda.Device(array.device.id).synchronize()
    return array, name


def cupy_to_tf(array, dtype_name: Optional[str] = None, sync: bool = True):
    """A ``tf.Tensor`` viewing ``array``'s memory (bit-cast back to bfloat16 when asked)."""
    import cupy
    import tensorflow as tf

    if sync:
        cupy.cuda.Device(array.device.id).synchronize()  # our kernels ran on our streams
    capsule = array.toDlpack() if hasattr(array, "toDlpack") else array.__dlpack__()
    tensor = tf.experimental.dlpack.from_dlpack(capsule)
    if dtype_name == "bfloat16":
        tensor = tf.bitcast(tensor, tf.bfloat16)
    return tensor


def _from_capsule(cupy, capsule):
    # CuPy >= 10 spells it from_dlpack (and still takes legacy capsules); older CuPy fromDlpack.
    from_dlpack = getattr(cupy, "from_dlpack", None)
    if from_dlpack is not None:
        try:
            return from_dlpack(capsule)
        except TypeError:
            pass
    return cupy.fromDlpack(capsule)
